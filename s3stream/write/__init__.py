"""A node's write path: its WAL namespace and fencing, the flush pipeline (multi-partition WAL objects),
sealing segments (here or in worker processes), the mapping of local-WAL errors, and the store's
metrics. Takes a :class:`~s3stream.write.context.StoreContext`, never the engine.
"""
