"""Decoding row groups whose bytes are already in memory, without pyarrow calling back into Python.

Read through a Python file object, pyarrow's decoder takes the GIL for every read it makes of the file,
and on a busy process (fetch threads parsing HTTP responses) each of those waits for a GIL hand-off: the
sequential reader spent more time waiting inside decode calls than decoding. Here each cached extent (the
object's bytes ``[start, start + len)``) is handed to pyarrow as a native buffer addressed as if it began
at object offset 0, so the footer's absolute offsets work unchanged and the decode runs without the GIL.

Groups spread over many small extents (the key and offset columns of every group of a segment, which the
cleaner's offset map reads) are instead copied into one buffer at their object offsets and decoded in one
call: a call costs ~0.3 ms whatever it decodes, so one per group was ~20 ms of CPU for a segment whose
~1.4 MiB of keys and offsets copy in about a millisecond. The buffer spans the object, but it is
anonymous memory whose pages nothing is copied to are never touched, so they take no memory.

Safety: the buffer claims to begin ``start`` bytes before the extent, memory that is not ours. A decode is
therefore only started for row groups whose column chunks lie inside the extent by bounds that contain
every byte pyarrow may read for them (:func:`chunk_bounds`, from the footer that was checked before);
past the extent's end the buffer itself ends, so pyarrow's own bounds checks apply there.
"""

from __future__ import annotations

import itertools
import mmap
from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from s3stream.format.segment.ranged import Extent

__all__ = ["chunk_bounds", "decode_in_memory"]

Span = tuple[int, int]

#: Groups in more than one extent are copied into one buffer when their chunks average at most this
#: many bytes: copying ~0.4 ms/MiB against a pyarrow call's ~0.3 ms (measured, 1 MiB groups).
_ASSEMBLE_BYTES_PER_GROUP = 512 << 10


def chunk_bounds(rg: pq.RowGroupMetaData, columns: Sequence[str]) -> Span:
    """The byte span holding every byte pyarrow may read for the chunks of ``columns`` (top-level names).

    pyarrow starts a chunk at its dictionary page when that offset is positive and below the data page
    offset, else at the data page, and reads ``total_compressed_size`` bytes (plus padding for files of
    old parquet-mr writers, bounded by the file's size); both starts are taken as lower bounds. For the
    files we write (no dictionary pages) this is exactly the chunks' bytes.
    """
    starts: list[int] = []
    ends: list[int] = []
    for c in range(rg.num_columns):
        col = rg.column(c)
        if col.path_in_schema.split(".")[0] in columns:
            data = int(col.data_page_offset)
            dictionary = int(col.dictionary_page_offset) if col.has_dictionary_page else 0
            start = min(data, dictionary) if dictionary > 0 else data
            starts.append(start)
            ends.append(max(start, data) + int(col.total_compressed_size))
    return min(starts), max(ends)


def decode_in_memory(metadata: pq.FileMetaData, extents: Sequence[tuple[int, Extent]], spans: Sequence[Span],
                     groups: Sequence[int], columns: Sequence[str], *, verify_pages: bool) -> pa.Table | None:
    """Row groups ``groups`` decoded from the cached ``extents`` (``(start, bytes)`` each), one call per run
    of groups inside one extent; None when a group's ``spans[g]`` (from :func:`chunk_bounds` over
    ``columns``) is not inside one extent.

    Raises whatever pyarrow raises for bytes it cannot decode (the caller names the object).
    """
    located: list[tuple[int, Extent, int]] = []  # (extent start, extent bytes, group)
    for g in groups:
        start, end = spans[g]
        held = next(((a, data) for a, data in extents if a <= start and end <= a + len(data)), None)
        if held is None:
            return None
        located.append((*held, g))
    runs = 1 + sum(1 for x, y in itertools.pairwise(located) if x[0] != y[0])
    if runs > 1 and sum(spans[g][1] - spans[g][0] for g in groups) <= _ASSEMBLE_BYTES_PER_GROUP * len(groups):
        return _decode_assembled(metadata, located, spans, columns, verify_pages)
    tables: list[pa.Table] = []
    i = 0
    while i < len(located):
        j = i + 1
        while j < len(located) and located[j][0] == located[i][0]:
            j += 1
        table = _decode_extent(metadata, located[i][0], located[i][1], [g for *_, g in located[i:j]],
                               columns, verify_pages)
        if table is None:
            return None
        tables.append(table)
        i = j
    return pa.concat_tables(tables) if len(tables) > 1 else tables[0]


def _decode_assembled(metadata: pq.FileMetaData, located: Sequence[tuple[int, Extent, int]],
                      spans: Sequence[Span], columns: Sequence[str], verify_pages: bool) -> pa.Table | None:
    """The groups of ``located`` decoded in one call from a buffer holding each one's span at its offset."""
    lo = min(spans[g][0] for *_, g in located)
    hi = max(spans[g][1] for *_, g in located)
    # anonymous memory: pages no span is copied to are never touched (numpy's zeros would ask for huge
    # pages, and each touch would then clear 2 MiB: measured 5x slower here)
    space = mmap.mmap(-1, hi - lo)
    buf = np.frombuffer(space, dtype=np.uint8)
    for a, data, g in located:
        start, end = spans[g]
        buf[start - lo:end - lo] = np.frombuffer(data, dtype=np.uint8, count=end - start, offset=start - a)
    del buf
    return _decode_extent(metadata, lo, pa.py_buffer(space), [g for *_, g in located], columns, verify_pages)


def _decode_extent(metadata: pq.FileMetaData, start: int, data: Extent | pa.Buffer, groups: list[int],
                   columns: Sequence[str], verify_pages: bool) -> pa.Table | None:
    held = data if isinstance(data, pa.Buffer) else pa.py_buffer(data)
    if held.address < start:  # cannot be addressed from offset 0 (never seen: heaps live far higher)
        return None
    # object offset x is at held.address + (x - start); the extent's end is the buffer's end
    whole = pa.foreign_buffer(held.address - start, start + held.size, base=held)
    pf = pq.ParquetFile(pa.BufferReader(whole), metadata=metadata, page_checksum_verification=verify_pages,
                        pre_buffer=False)
    return pf.read_row_groups(groups, columns=list(columns), use_threads=False)
