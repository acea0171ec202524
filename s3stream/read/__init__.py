"""Where a partition's records live and how they are read: the tiers (sealed segments, WAL-object chunks,
the writer's memory) and the scans of a writer's WAL namespace. Below ``write``: reads never write.
"""
