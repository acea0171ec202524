"""Segment reads that keep no stream state: the whole object, or row groups a caller picked.

Verification tools read a segment whole and check its CRC32C; the cleaner picks the row groups it needs
from the footer and reads them at once. Neither continues where an earlier read stopped, so both bypass
the streaming reader's cache and read-ahead: each call reads into a file of its own (calls may run
concurrently on one reader, and nothing stays cached), and the same checks as every read apply
(:mod:`.checks`).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from concurrent.futures import Executor

import crc32c
import pyarrow as pa
import pyarrow.parquet as pq

from s3stream.base.errors import CorruptData, InvalidRequest
from s3stream.format.segment.budget import concat
from s3stream.format.segment.buffered import decode_in_memory
from s3stream.format.segment.checks import ALL_COLUMN_SET, check_groups, checked_group, decoding, verify_whole
from s3stream.format.segment.footer import parse_footer
from s3stream.format.segment.format import RowGroupInfo
from s3stream.format.segment.ranged import Extent, Fetch, FetchMany, RangedFile, fetches
from s3stream.format.segment.readahead import Span, coalesce

__all__ = ["read_picked", "read_whole"]


def read_whole(fetch: Fetch, object_size: int, source: str, *, verify_crc32c: int | None,
               columns: list[str]) -> pa.Table:
    """The whole segment in one fetch, CRC32C-verified when ``verify_crc32c`` is given.

    Raises:
        CorruptData: CRC mismatch, or any decode/validation failure.
    """
    data = RangedFile(fetch, object_size, source=source).fetch(0, object_size)
    if verify_crc32c is not None and crc32c.crc32c(data) != verify_crc32c:
        raise CorruptData("segment object CRC32C mismatch", source=source)
    with decoding(None, source):
        verify_whole(data, source)
        pf = pq.ParquetFile(pa.BufferReader(data), page_checksum_verification=True, pre_buffer=False)
        footer = parse_footer(pf.metadata, pf.schema_arrow, object_size, source=source)
        need = ["offset", *(c for c in columns if c != "offset")]
        tables = [checked_group(pf.read_row_group(g, columns=need, use_threads=True), info, g, source)
                  for g, info in enumerate(footer.row_groups)]
        return concat(tables, need).select(columns)


def read_picked(fetch: Fetch, object_size: int, source: str, groups: Sequence[int], need: tuple[str, ...], *,
                metadata: pq.FileMetaData, infos: Sequence[RowGroupInfo], spans: Sequence[Span],
                block_bytes: int, fetch_many: FetchMany | None, executor: Executor | None = None) -> pa.Table:
    """Row groups ``groups`` (ascending indexes) of columns ``need`` decoded at once (see
    :meth:`~.reader.SegmentReader.read_groups`); ``metadata``, ``infos`` and ``spans`` come from the
    opened footer; runs after the first are fetched on ``executor`` (the process-wide fetch pool by default).

    Raises:
        InvalidRequest: a group index out of range or not ascending.
        CorruptData: the object failed a checksum or disagrees with its footer.
    """
    picked = list(groups)
    if any(not 0 <= g < len(infos) for g in picked) or any(b <= a for a, b in itertools.pairwise(picked)):
        raise InvalidRequest(f"row groups must be ascending indexes below {len(infos)}, got {picked[:8]}")
    if not picked:
        return concat([], need)
    whole = set(need) == ALL_COLUMN_SET and all(infos[g].crc32c is not None for g in picked)
    runs = coalesce([spans[g] for g in picked])
    file = RangedFile(fetch, object_size, source=source, block_bytes=block_bytes,
                      cache_bytes=sum(b - a for a, b in runs), fetch_many=fetch_many, executor=executor)
    if whole:  # each group's CRC32C is checked as its bytes arrive: no page checksums to verify
        # runs after the first are fetched on the fetch pool meanwhile (store latency, not bandwidth)
        pool = fetches(executor)
        later = [pool.submit(_fetch_groups, fetch, object_size, source, run, infos) for run in runs[1:]]
        file.prime(runs[0][0], _fetch_groups(fetch, object_size, source, runs[0], infos))
        for run, fetched in zip(runs[1:], later, strict=True):
            file.prime(run[0], fetched.result())
    else:  # in one call on this thread where the store offers it (a key scan: a range per row group)
        file.load(runs)
    with decoding(file, source):
        table = decode_in_memory(metadata, file.extents(), spans, picked, need, verify_pages=not whole)
        if table is None:  # a run's bytes were not kept whole (never expected: the cache holds them all)
            pf = pq.ParquetFile(file, metadata=metadata, page_checksum_verification=not whole, pre_buffer=True)
            table = pf.read_row_groups(picked, columns=list(need), use_threads=False)
        file.clear()
        check_groups(table, [infos[g] for g in picked], source)
    return table.replace_schema_metadata(None)


def _fetch_groups(fetch: Fetch, object_size: int, source: str, span: Span,
                  infos: Sequence[RowGroupInfo]) -> Extent:
    """Bytes ``span`` (whole row groups), each group checked against its CRC32C in the footer index."""
    a, b = span
    data = RangedFile(fetch, object_size, source=source).fetch(a, b)
    view = memoryview(data)
    for g in infos:
        inside = a <= g.byte_start and g.byte_end <= b
        if inside and crc32c.crc32c(view[g.byte_start - a:g.byte_end - a]) != g.crc32c:
            raise CorruptData(f"row group at bytes [{g.byte_start}, {g.byte_end}) fails its CRC32C",
                              source=source)
    return data
