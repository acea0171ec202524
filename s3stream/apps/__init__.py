"""Front ends over the public API: the CLI, the Spark data source and jobs, ``serve``, the quickstart and
the local stack. Nothing in the library imports them.
"""
