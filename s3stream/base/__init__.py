"""The bottom layer: errors, injected time and ids, records, object-key layout, store settings and topic
configs, crash points. Imports nothing else of s3stream.
"""
