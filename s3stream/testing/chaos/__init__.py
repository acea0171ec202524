"""Real-process crash harness on SeaweedFS (issue 27, item 3): writers, cleaners and retention passes in
child processes, SIGKILLed at random moments and at named crash points, the S3 server SIGKILLed under
them, two nodes claiming the same partitions; everything read back and held to the side logs the workers
wrote of what was acknowledged.

* :mod:`.sidelog`: the side log (intents and acknowledgements, flushed per line) and the records' identity;
* :mod:`.worker`: the child process (``python -m s3stream.testing.chaos.worker``);
* :mod:`.audit`: a read of a partition held to the side logs (pure);
* :mod:`.harness`: the server, the workers' lifecycles, the reads and the manifest history;
* :mod:`.scenarios`: the four scenarios; :mod:`.cli`: ``python -m s3stream.chaos``.

Nothing shipped imports this package; its tests are in tests/chaos.
"""
