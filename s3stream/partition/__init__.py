"""One partition for its users: :class:`~s3stream.partition.log.PartitionLog` (append, read, roll, offsets),
and the claim that makes this node its writer. Talks to the engine through the narrow
:class:`~s3stream.partition.host.LogHost` protocol.
"""
