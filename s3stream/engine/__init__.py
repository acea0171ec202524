"""The runtime of one open store: the shared caches, the node, the partitions and the background step
functions (flush, seal) that threads drive in production and a simulator can drive in one thread.
"""
