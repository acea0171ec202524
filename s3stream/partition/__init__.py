"""One partition for its users: :class:`~s3stream.partition.log.PartitionLog` (append, read, roll, offsets).

Its parts, one module each: ``state`` (the cached manifest, the writer state, the views reads take), ``writer``
(unsealed segments and the tail), ``validate`` (an append checked before anything is written), ``appends``
(the append queue, its drain rounds and WAL entries), ``reads``, ``sealing`` (rolled segments into segment
objects), ``publish`` (bulk publish of staged segments), ``recovery`` (local WAL replay) and ``claim`` (the
writer-epoch claim). Talks to the engine through the narrow :class:`~s3stream.partition.host.LogHost` protocol.
"""
