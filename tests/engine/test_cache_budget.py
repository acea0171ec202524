"""``cache_bytes`` bounds the tail cache and the decoded WAL-object chunk cache together.

The chunk cache holds records read back from WAL objects (a reader behind the tail cache, another
process's unsealed records, seals); it gets what the tail cache leaves and is evicted first when the
tail grows (docs/configuration.md#memory).
"""

from __future__ import annotations

from pathlib import Path

from .helpers import open_mem, read_all, recs

BUDGET = 256 << 10


def test_chunk_cache_shares_cache_bytes_with_the_tail_cache(mem_url: str, tmp_path: Path) -> None:
    with open_mem(mem_url, tmp_path, cache_bytes=BUDGET) as writer:
        writer.create_topic("t")
        writer.create_topic("u")
        log = writer.partition("t", 0)
        for i in range(12):  # 12 WAL objects of about 64 KiB of records each, none sealed
            log.append(recs(64, start=64 * i, size=1000))
            writer.flush()
        with open_mem(mem_url, tmp_path, wal="reader", cache_bytes=BUDGET) as reader:
            rt = reader.runtime
            assert len(read_all(reader.partition("t", 0))) == 768  # every record from WAL-object chunks
            assert BUDGET // 2 < rt.chunks.nbytes <= BUDGET
            reader.partition("u", 0).append(recs(100, size=1000))  # this process's tail cache grows
            assert rt._memory_bytes > 0
            assert rt.chunks.nbytes + rt._memory_bytes <= BUDGET
