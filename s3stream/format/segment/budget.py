"""Budget arithmetic of a segment read: where ``max_records``/``max_bytes`` stop it, and the cut.

The rules are subtle (a byte budget is soft for the first record, whole row groups count their size from
the footer index while only a group a budget may end inside is sized row by row), and the reader's I/O
planning depends on them; kept here as pure functions over counts and tables, they can be read and
tested without a reader, fetches or threads.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from s3stream.base.records import RECORD_SCHEMA
from s3stream.format.segment.format import RowGroupInfo

__all__ = ["concat", "cut_to_budget", "satisfied", "whole_groups_end"]


def satisfied(rows: int, nbytes: int, max_records: int | None, max_bytes: int | None) -> bool:
    """Whether a read holding ``rows`` rows of ``nbytes`` logical bytes has reached a budget."""
    if max_records is None and max_bytes is None:
        return False
    return rows > 0 and ((max_records is not None and rows >= max_records)
                         or (max_bytes is not None and nbytes >= max_bytes))


def whole_groups_end(groups: Sequence[RowGroupInfo], g: int, end: int, rows: int, nbytes: int,
                     max_records: int | None, max_bytes: int | None) -> int:
    """The end of the groups from ``g`` (below ``end``) a read takes whole: each fits both budgets
    with the rows and bytes before it, and the read goes on after each until a budget is reached."""
    h = g
    while h < end and not satisfied(rows, nbytes, max_records, max_bytes):
        info = groups[h]
        if ((max_records is not None and rows + info.num_rows > max_records)
                or (max_bytes is not None and nbytes + info.size_bytes > max_bytes)):
            break
        rows, nbytes, h = rows + info.num_rows, nbytes + info.size_bytes, h + 1
    return h


def concat(tables: list[pa.Table], columns: Sequence[str]) -> pa.Table:
    """``tables`` as one table (an empty one of ``columns`` when there are none)."""
    if not tables:
        return pa.schema([RECORD_SCHEMA.field(c) for c in columns]).empty_table()
    return pa.concat_tables(tables) if len(tables) > 1 else tables[0]


def cut_to_budget(pieces: list[pa.Table], columns: Sequence[str], rows: int, nbytes: int,
                  last_sizes: npt.NDArray[np.int64] | None, max_records: int | None, max_bytes: int | None,
                  at_least_one: bool) -> tuple[pa.Table, int, bool]:
    """The pieces' longest prefix within both budgets (at least one row if ``at_least_one``), its logical
    bytes, and whether rows were left out.

    ``rows``/``nbytes`` are the pieces' totals. Every piece but the last is within both budgets (the read
    loop stops at the first piece that reaches one), so only the last may be cut, and ``last_sizes`` (its
    row sizes) is given whenever a byte budget can cut it.
    """
    over_rows = max_records is not None and rows > max_records
    over_bytes = max_bytes is not None and nbytes > max_bytes
    if not over_rows and not over_bytes:
        return concat(pieces, columns), nbytes, False
    last = pieces[-1]
    rows_before = rows - last.num_rows
    keep = last.num_rows if max_records is None else min(last.num_rows, max_records - rows_before)
    used = nbytes
    if max_bytes is not None:
        assert last_sizes is not None
        bytes_before = nbytes - int(last_sizes.sum())
        cum = np.cumsum(last_sizes[:keep])
        keep = int(np.searchsorted(cum, max_bytes - bytes_before, side="right"))
        if at_least_one and keep == 0 and rows_before == 0:
            keep = 1
        used = bytes_before + (int(cum[keep - 1]) if keep else 0)
    kept = [*pieces[:-1], last.slice(0, keep)] if keep else pieces[:-1]
    return concat(kept, columns), used, True
