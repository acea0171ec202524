"""The Kafka-wire-compatible server: unmodified Kafka clients produce, consume, join groups and administer.

Layout: :mod:`.server` (asyncio framing and dispatch), :mod:`.wire` (kio messages), :mod:`.api` (the handler
contract), :mod:`.broker` (shared state), :mod:`.errors` (the error-code table), :mod:`.handlers` (one module
per API family), :mod:`.records` (record batches: decode, encode, caches), :mod:`.groups` (the consumer-group
coordinator), :mod:`.security` (TLS, SASL). See ``docs/kafka.md``.
"""
