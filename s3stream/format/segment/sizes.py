"""Logical record sizes, row by row: the unit every byte budget and roll threshold counts in.

A segment's row groups are cut by logical bytes, a budgeted read stops at them and ``segment.bytes`` is
measured in them, so writer, reader and callers outside the codec must size a row identically; this
module is that one definition (its per-row sum equals :func:`s3stream.base.records.batch_nbytes`),
vectorised so sizing a table costs a few Arrow kernels, not a Python loop per row.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["row_sizes"]


def row_sizes(data: pa.Table | pa.RecordBatch) -> npt.NDArray[np.int64]:
    """Per-row logical sizes (their sum is :func:`records.batch_nbytes`), computed column-wise."""
    chunks = [_batch_row_sizes(b) for b in _batches(data)]
    return np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.int64)


def _batches(data: pa.Table | pa.RecordBatch) -> list[pa.RecordBatch]:
    return [data] if isinstance(data, pa.RecordBatch) else data.to_batches()


def _lengths(col: pa.Array) -> npt.NDArray[np.int64]:
    return np.asarray(pc.fill_null(pc.binary_length(col), 0).to_numpy(zero_copy_only=False), dtype=np.int64)


def _batch_row_sizes(batch: pa.RecordBatch) -> npt.NDArray[np.int64]:
    n = batch.num_rows
    sizes = np.full(n, 21, dtype=np.int64) + _lengths(batch.column("key")) + _lengths(batch.column("value"))
    headers = batch.column("headers")
    if n and headers.null_count != n:
        flat = headers.flatten()
        if len(flat):
            entry = _lengths(flat.field("key")) + _lengths(flat.field("value")) + 8
            parents = np.asarray(pc.list_parent_indices(headers).to_numpy(), dtype=np.int64)
            sizes += np.bincount(parents, weights=entry, minlength=n).astype(np.int64)
    return sizes
