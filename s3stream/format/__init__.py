"""Sans-IO codecs of the bytes s3stream writes: local WAL entries, multi-partition WAL objects, Parquet
segments. Every decoder fails with CorruptData on bad bytes. Imports only ``base``.
"""
