"""Background passes over the engine: retention (rules over manifests) and garbage collection of
objects no manifest needs. They take the engine, never the Store facade.
"""
