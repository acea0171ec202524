"""Pure decisions over a snapshot and a clock: when a segment rolls, what retention deletes. No I/O;
imports only ``base``.
"""
