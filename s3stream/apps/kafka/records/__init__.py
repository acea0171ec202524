"""Kafka record batches (magic v2) for the data path: check and decode produced batches, encode stored
records, and the caches and signals Produce and Fetch share.

* :mod:`.batch`: the 61-byte header, CRC32C, the base-offset patch;
* :mod:`.compression`: bounded gzip/snappy/lz4/zstd decompression;
* :mod:`.decode`: a produced batch to the Arrow columns ``append_arrow`` takes;
* :mod:`.encode`: stored Arrow records to v2 batches, vectorised;
* :mod:`.tail_cache`, :mod:`.cold_cache`, :mod:`.signals`, :mod:`.datapath`: what Fetch serves from and
  how long polls wake.
"""
