"""Damaged segment objects raise CorruptData naming the source, or decode to the correct records."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from s3stream.base.errors import CorruptData
from s3stream.format.segment import SegmentReader, encode_segment

from .strategies import make_batch

SOURCE = "logs/t/0/segments/00000000000000000010-x.parquet"


@pytest.fixture(scope="module")
def segment() -> tuple[bytes, pa.Table, int]:
    rows = [{"timestamp": (i * 7919) % 1000, "key": None if i % 7 == 0 else b"k%d" % i,
             "value": None if i % 5 == 0 else bytes(range(i % 20)),
             "headers": [{"key": "h", "value": b"x" * (i % 4)}] if i % 3 == 0 else None,
             "horizon_ms": 5 if i % 11 == 0 else None} for i in range(36)]
    batch = make_batch(rows, list(range(10, 118, 3)))
    data, summary = encode_segment(batch, base_offset=10, last_offset=500, row_group_bytes=500)
    return data, pa.Table.from_batches([batch]), summary.crc32c


def _outcome(data: bytes, good: pa.Table, *, whole: bool, groups: bool = False) -> str:
    reader = SegmentReader(lambda s, e: data[s:e], len(data), source=SOURCE)
    try:
        if groups:  # every row group picked at once: checked by the row groups' CRC32Cs, not page checksums
            got = reader.read_groups(range(len(reader.row_groups)))
        else:
            got = reader.read_all() if whole else reader.read(0)
    except CorruptData as e:
        assert SOURCE in str(e)
        return "corrupt"
    return "equal" if got.equals(good) else "WRONG"


@pytest.mark.parametrize(("whole", "groups"), [(False, False), (True, False), (False, True)],
                         ids=["ranged-read", "read_all", "read_groups"])
def test_every_flipped_byte_is_detected_or_harmless(segment: tuple[bytes, pa.Table, int], whole: bool,
                                                    groups: bool) -> None:
    data, good, _ = segment
    footer_start = len(data) - 8 - int.from_bytes(data[-8:-4], "little")
    outcomes: dict[str, list[int]] = {}
    for i in range(len(data)):
        corrupted = bytearray(data)
        corrupted[i] ^= 1 << (i % 8)
        outcomes.setdefault(_outcome(bytes(corrupted), good, whole=whole, groups=groups), []).append(i)
    assert "WRONG" not in outcomes, outcomes.get("WRONG")
    # all of the footer and its trailer are covered by the footer CRC32C
    assert all(i < footer_start for i in outcomes.get("equal", []))
    assert len(outcomes["corrupt"]) > 0.8 * len(data)
    if not whole:  # whole row groups are checked by their CRC32Cs: every byte between the magic and the footer
        assert all(i < 4 for i in outcomes.get("equal", []))


def test_flipped_byte_in_a_value_page_fails_the_page_checksum(segment: tuple[bytes, pa.Table, int]) -> None:
    data, good, _ = segment
    meta = pq.ParquetFile(pa.BufferReader(data)).metadata
    col = meta.row_group(1).column(3)
    assert col.path_in_schema == "value"
    middle = col.data_page_offset + col.total_compressed_size - 5  # inside the compressed page body
    corrupted = bytearray(data)
    corrupted[middle] ^= 0x40
    assert _outcome(bytes(corrupted), good, whole=False) == "corrupt"
    reader = SegmentReader(lambda s, e: bytes(corrupted)[s:e], len(data), source=SOURCE)
    assert reader.read(0, max_records=1).num_rows == 1  # row group 0 is intact and still readable


def test_truncated_objects_are_corrupt(segment: tuple[bytes, pa.Table, int]) -> None:
    data, good, _ = segment
    for cut in [1, 4, 8, 9, 100, len(data) // 2, len(data) - 12, len(data) - 1]:
        assert _outcome(data[:-cut], good, whole=False) == "corrupt"
        assert _outcome(data[:-cut], good, whole=True) == "corrupt"
        assert _outcome(data[cut:], good, whole=False) == "corrupt"
    for junk in (b"", b"\0" * 11, b"PAR1", b"PAR1\0\0\0\0PAR1"):
        assert _outcome(junk, good, whole=False) == "corrupt"


def test_read_all_crc_catches_what_page_checksums_cannot(segment: tuple[bytes, pa.Table, int]) -> None:
    data, _, crc = segment
    corrupted = bytearray(data)
    corrupted[5] ^= 1
    reader = SegmentReader(lambda s, e: bytes(corrupted)[s:e], len(data), source=SOURCE)
    with pytest.raises(CorruptData, match="CRC32C"):
        reader.read_all(verify_crc32c=crc)


def test_footer_index_inconsistent_with_data_is_corrupt(segment: tuple[bytes, pa.Table, int],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """A writer bug (index says other offsets than the rows hold) is caught when the rows are read."""
    from s3stream.format.segment import writer as fmt

    real = fmt._index_json

    def lying(rows: list[list[int]]) -> str:
        rows = [list(r) for r in rows]
        rows[0][1] += 1  # last offset of row group 0 off by one
        rows[1][0] += 1
        return real(rows)

    monkeypatch.setattr(fmt, "_index_json", lying)
    _, good, _ = segment
    batch = good.to_batches()[0]
    data, _ = encode_segment(batch, base_offset=10, last_offset=500, row_group_bytes=500)
    monkeypatch.undo()
    assert _outcome(data, good, whole=False) == "corrupt"
