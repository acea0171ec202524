"""``s3stream dump`` of real segment and WAL objects (checksums verified, corruption reported) and
``s3stream manifest show``."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import s3stream
from s3stream.base.records import Record

from .helpers import Cli, error_line, jsonl


@pytest.fixture
def filled(cli: Cli) -> Cli:
    """A 2-partition topic with sealed segments (small segment.bytes, then a roll) and WAL objects."""
    cli.ok("topic", "create", "t", "-p", "2", "-c", "segment.bytes=8192")
    store = s3stream.open_store(cli.url, probe=False)
    try:
        for p in range(2):
            log = store.partition("t", p)
            for i in range(4):
                log.append([Record(b"k%d" % j, b"value-%d-%d" % (i, j), headers=[("h", b"\xff")])
                            for j in range(50)])
            log.roll()
    finally:
        store.close()
    return cli


def test_dump_segment_verifies_every_checksum(filled: Cli) -> None:
    segment = filled.files(".parquet")[0]
    key = filled.key(segment)
    result = filled.ok("dump", key)
    assert f"segment object {key}" in result.stdout
    assert result.stdout.count("ok  ") == 4  # footer, row-group crc32cs, pages + row groups, crc vs manifest
    assert "matches manifest seq" in result.stdout

    doc = json.loads(filled.ok("dump", key, "--json").stdout)
    meta = doc["metadata"]
    assert doc["kind"] == "segment" and meta["format version"] == 2
    assert meta["object size"] == segment.stat().st_size
    assert meta["record count"] == sum(g["records"] for g in doc["row_groups"]) > 0
    assert all(c["ok"] for c in doc["checks"])

    records = jsonl(filled.ok("dump", key, "--records", "--json").stdout.split("\n}\n", 1)[1])
    assert len(records) == meta["record count"]
    assert [r["offset"] for r in records] == list(range(meta["base offset"], meta["last offset"] + 1))
    assert records[0]["headers_b64"] == [["h", "/w=="]] and records[0]["log"].endswith(f"/{records[0]['partition']}")


def test_dump_segment_by_absolute_path_in_the_store(filled: Cli) -> None:
    segment = filled.files(".parquet")[0]
    result = filled.ok("dump", str(segment))
    assert "matches manifest seq" in result.stdout


def test_dump_wal_object(filled: Cli) -> None:
    docs = [json.loads(filled.ok("dump", filled.key(p), "--json").stdout) for p in filled.files(".wal")]
    assert all(d["kind"] == "wal" and all(c["ok"] is not False for c in d["checks"]) for d in docs)
    with_data = [d for d in docs if d["metadata"]["records"] > 0]
    assert with_data, "the store should hold a WAL object with records"
    doc = with_data[0]
    assert {c["status"] for c in doc["chunks"]} == {"ok"}
    assert doc["metadata"]["node id"] in doc["source"]
    key = doc["source"]
    out = filled.ok("dump", key, "--records").stdout
    records = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert len(records) == doc["metadata"]["records"]
    assert all(r["log"].startswith("t/") for r in records)


def test_dump_reports_a_corrupt_segment(filled: Cli, tmp_path: Path) -> None:
    segment = filled.files(".parquet")[0]
    groups = json.loads(filled.ok("dump", filled.key(segment), "--json").stdout)["row_groups"]
    start, end = (int(x) for x in groups[0]["bytes"].strip("[)").split(","))
    data = bytearray(segment.read_bytes())
    data[(start + end) // 2] ^= 0xFF  # inside the first row group's column chunks
    outside = tmp_path / "copy.parquet"
    outside.write_bytes(bytes(data))
    result = filled("dump", str(outside))
    assert result.exit_code == 1
    line = error_line(result)
    assert line.startswith(f"corrupt data: {outside}: ") and "page crcs" in line
    assert "FAILED" in result.stdout  # the metadata was still printed

    segment.write_bytes(bytes(data))  # now inside the store: the manifest check fails too
    result = filled("dump", filled.key(segment), "--json")
    assert result.exit_code == 1
    failed = [c["name"] for c in json.loads(result.stdout)["checks"] if c["ok"] is False]
    assert failed == ["row-group crc32cs (footer index)", "page crcs + row groups vs footer index",
                      "object crc32c vs manifest"]


def test_dump_reports_a_corrupt_wal_object(filled: Cli, tmp_path: Path) -> None:
    wal = max(filled.files(".wal"), key=lambda p: p.stat().st_size)
    data = bytearray(wal.read_bytes())
    data[20] ^= 0xFF  # inside the first chunk
    bad = tmp_path / "bad.wal"
    bad.write_bytes(bytes(data))
    result = filled("dump", str(bad))
    assert result.exit_code == 1
    assert "CRC32C mismatch" in error_line(result) and "CORRUPT" in result.stdout

    data[-1] ^= 0xFF  # the trailer magic: the object cannot be framed at all
    bad.write_bytes(bytes(data))
    result = filled("dump", str(bad))
    assert result.exit_code == 1 and "bad trailer magic" in error_line(result)


def test_dump_errors(filled: Cli, tmp_path: Path) -> None:
    result = filled("dump", "logs/nope/0/segments/x.parquet")
    assert result.exit_code == 1 and "not found" in error_line(result)
    result = filled("dump", str(tmp_path / "missing.wal"))
    assert result.exit_code == 1 and "no such file" in error_line(result)
    manifest = filled.files(".json")[0]
    result = filled("dump", filled.key(manifest))
    assert result.exit_code == 1 and "manifest show" in error_line(result)
    junk = tmp_path / "junk.parquet"
    junk.write_bytes(b"x" * 100)
    result = filled("dump", str(junk))
    assert result.exit_code == 1 and error_line(result).startswith("corrupt data: ")


def test_manifest_show(filled: Cli) -> None:
    result = filled.ok("manifest", "show", "t", "1")
    doc = json.loads(result.stdout)
    assert doc["partition"] == 1 and doc["seq"] >= 2 and doc["format"] == 1
    assert len(doc["segments"]) >= 1 and doc["next_offset"] == 200
    assert "/1/manifest/" in result.stderr

    first = json.loads(filled.ok("manifest", "show", "t", "1", "--seq", "1").stdout)
    assert first["seq"] == 1 and first["parent_seq"] is None

    result = filled("manifest", "show", "t", "1", "--seq", "999")
    assert result.exit_code == 1 and "has no manifest version 999" in error_line(result)
    result = filled("manifest", "show", "t", "2")
    assert result.exit_code == 1 and error_line(result) == "error: topic 't' has no partition 2 (it has 2)"


def test_manifest_show_before_the_first_commit_and_when_corrupt(cli: Cli) -> None:
    cli.ok("topic", "create", "t")
    result = cli.ok("manifest", "show", "t", "0")
    assert json.loads(result.stdout)["seq"] == 0 and "no manifest yet" in result.stderr

    cli.ok("produce", "t", input="a\n")
    manifest = cli.files(".json")
    latest = max((p for p in manifest if "/manifest/" in p.as_posix()), key=lambda p: p.name)
    shutil.copy(latest, latest.with_suffix(".bak"))
    latest.write_bytes(latest.read_bytes().replace(b'"partition":0', b'"partition":"0"'))
    result = cli("manifest", "show", "t", "0", "--seq", str(int(latest.stem)))
    assert result.exit_code == 1 and error_line(result).startswith("corrupt data: ")
