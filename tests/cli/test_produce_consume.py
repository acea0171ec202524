"""``s3stream produce`` and ``s3stream consume``: both input formats, placement, binary data, positions."""

from __future__ import annotations

import base64
import json
import threading
from collections import Counter

import pytest

import s3stream
from s3stream.apps.cli.jsonl import record_from_json, table_to_jsonl
from s3stream.base.errors import InvalidRequest
from s3stream.base.records import Record, batch_from_records
from s3stream.policy.partitioner import partition_for_key

from .helpers import Cli, error_line, jsonl, lines


def test_lines_with_keys_land_where_kafka_would_put_them(cli: Cli) -> None:
    cli.ok("topic", "create", "t", "-p", "3")
    keys = [f"user-{i % 17}" for i in range(200)]
    result = cli.ok("produce", "t", "--key-separator", ":", input=lines(f"{k}:v{i}" for i, k in enumerate(keys)))
    assert "produced 200 records to 't'" in result.stderr
    out = jsonl(cli.ok("consume", "t").stdout)
    assert len(out) == 200
    for rec in out:
        assert rec["partition"] == partition_for_key(str(rec["key"]).encode(), 3)
        assert set(rec) == {"topic", "partition", "offset", "timestamp", "key", "value", "headers"}
        assert rec["topic"] == "t" and rec["headers"] == []
    for p in range(3):  # per partition: dense offsets from 0, in input order
        mine = [r for r in out if r["partition"] == p]
        assert [r["offset"] for r in mine] == list(range(len(mine)))
        values = [int(str(r["value"])[1:]) for r in mine]
        assert values == sorted(values)


def test_lines_without_keys_go_round_robin_and_keep_bytes(cli: Cli) -> None:
    cli.ok("topic", "create", "t", "-p", "3")
    cli.ok("produce", "t", input=b"a\r\n\nc  \nd\ne\xff\nf")  # CRLF, empty line, no final newline
    out = jsonl(cli.ok("consume", "t", "--from-beginning").stdout)
    assert Counter(r["partition"] for r in out) == {0: 2, 1: 2, 2: 2}
    by_value = {r.get("value", r.get("value_b64")): r for r in out}
    assert set(by_value) == {"a", "", "c  ", "d", base64.b64encode(b"e\xff").decode(), "f"}
    assert all(r["key"] is None for r in out)
    assert "value" not in by_value[base64.b64encode(b"e\xff").decode()]


def test_partition_flag_and_line_errors(cli: Cli) -> None:
    cli.ok("topic", "create", "t", "-p", "2")
    cli.ok("produce", "t", "--partition", "1", input="x\ny\n")
    out = jsonl(cli.ok("consume", "t", "--partition", "1").stdout)
    assert [r["value"] for r in out] == ["x", "y"]
    assert cli.ok("consume", "t", "--partition", "0").stdout == ""

    result = cli("produce", "t", "--partition", "2", input="x\n")
    assert result.exit_code == 1 and "has no partition 2" in error_line(result)
    result = cli("produce", "t", "-k", ":", input="a:1\nno-separator\n")
    assert result.exit_code == 1 and error_line(result) == "error: stdin line 2: no key separator ':' found"
    # as with Kafka's console producer, the lines before the bad one were appended
    assert any(r["key"] == "a" for r in jsonl(cli.ok("consume", "t").stdout))


def test_jsonl_round_trip_with_binary_headers_timestamps_and_tombstones(cli: Cli) -> None:
    cli.ok("topic", "create", "src", "-p", "2")
    cli.ok("topic", "create", "dst", "-p", "2")
    inputs = [
        {"key": "k1", "value": "héllo", "headers": {"h1": "x", "h2": None}, "timestamp": 1_700_000_000_000},
        {"key_b64": base64.b64encode(b"\x00\xff").decode(), "value_b64": base64.b64encode(b"\xfe").decode(),
         "partition": 1},
        {"key": "k1", "value": None, "headers": [["a", "1"], ["a", "2"]], "timestamp": 1_700_000_000_001},
        {"key": None, "value": "v", "headers_b64": [["bin", base64.b64encode(b"\x80").decode()]], "partition": 0},
    ]
    text = "\n".join(json.dumps(x) for x in inputs) + "\n\n"  # a blank line is skipped
    cli.ok("produce", "src", "--format", "jsonl", input=text)
    out = sorted(jsonl(cli.ok("consume", "src").stdout), key=lambda r: (r["partition"], r["offset"]))
    k1 = [r for r in out if r.get("key") == "k1"]
    assert [r["timestamp"] for r in k1] == [1_700_000_000_000, 1_700_000_000_001]
    assert k1[0]["value"] == "héllo" and k1[0]["headers"] == [["h1", "x"], ["h2", ""]]
    assert k1[1]["value"] is None and k1[1]["headers"] == [["a", "1"], ["a", "2"]]
    binary = next(r for r in out if "key_b64" in r)
    assert binary["partition"] == 1 and "key" not in binary and "value" not in binary
    assert base64.b64decode(binary["key_b64"]) == b"\x00\xff" and base64.b64decode(binary["value_b64"]) == b"\xfe"
    hdr = next(r for r in out if "headers_b64" in r)
    assert hdr["partition"] == 0 and "headers" not in hdr and hdr["headers_b64"] == [["bin", "gA=="]]

    # consume output replays through produce unchanged (topic and offset are ignored)
    replay = "".join(json.dumps(r) + "\n" for r in out)
    cli.ok("produce", "dst", "--format", "jsonl", input=replay)
    again = sorted(jsonl(cli.ok("consume", "dst").stdout), key=lambda r: (r["partition"], r["offset"]))
    assert [{**r, "topic": "src"} for r in again] == out


@pytest.mark.parametrize(("line", "message"), [
    ("not json", "not valid JSON"),
    ("[1, 2]", "expected a JSON object"),
    ('{"valu": "x"}', "unknown field(s) valu"),
    ('{"value": 5}', "value must be a string or null"),
    ('{"value": "x", "value_b64": "eA=="}', "either value or value_b64"),
    ('{"value_b64": "***"}', "not valid base64"),
    ('{"headers": {"h": 1}}', "header 'h' value must be a string"),
    ('{"headers": [["h"]]}', "list of [name, value] pairs"),
    ('{"timestamp": "now"}', "timestamp must be an integer"),
    ('{"partition": true}', "partition must be an integer"),
])
def test_jsonl_input_errors_name_the_line(cli: Cli, line: str, message: str) -> None:
    cli.ok("topic", "create", "t")
    result = cli("produce", "t", "--format", "jsonl", input='{"value": "ok"}\n' + line + "\n")
    assert result.exit_code == 1
    assert error_line(result).startswith("error: stdin line 2: ") and message in error_line(result)


def test_jsonl_codec_round_trips_any_bytes() -> None:
    recs = [Record(b"\x00k", b"\xff" * 3, 5, (("h", b"\xc3"), ("g", b"ok"))), Record(None, None, 6),
            Record("ключ".encode(), "значение".encode(), 7, (("h", "ü".encode()),))]
    table = __import__("pyarrow").Table.from_batches([batch_from_records(recs, 10, [5, 6, 7])])
    parsed = [record_from_json(line, "x") for line in table_to_jsonl(table, {"partition": 3}).splitlines()]
    assert [r for r, _ in parsed] == recs
    assert [p for _, p in parsed] == [3, 3, 3]
    with pytest.raises(InvalidRequest):
        record_from_json('{"key": "a", "key_b64": "YQ=="}', "x")


def test_consume_positions_and_limits(cli: Cli) -> None:
    cli.ok("topic", "create", "t")
    store = s3stream.open_store(cli.url, probe=False)
    try:
        log = store.partition("t", 0)
        log.append([Record(None, f"v{i}".encode(), timestamp=1_000 + 10 * i) for i in range(20)])
    finally:
        store.close()
    values = lambda r: [x["value"] for x in jsonl(r.stdout)]  # noqa: E731
    assert values(cli.ok("consume", "t", "--offset", "15")) == [f"v{i}" for i in range(15, 20)]
    assert values(cli.ok("consume", "t", "--offset", "20")) == []
    assert values(cli.ok("consume", "t", "--timestamp", "1055")) == [f"v{i}" for i in range(6, 20)]
    assert values(cli.ok("consume", "t", "--timestamp", "99999")) == []
    assert values(cli.ok("consume", "t", "--from-beginning", "--max-records", "3")) == ["v0", "v1", "v2"]
    assert "consumed 3 records" in cli.ok("consume", "t", "-n", "3").stderr

    result = cli("consume", "t", "--offset", "21")
    assert result.exit_code == 1 and error_line(result) == "error: partition 0: offset 21 is out of range [0, 20]"
    result = cli("consume", "t", "--offset", "1", "--from-beginning")
    assert result.exit_code == 1 and "at most one of" in error_line(result)
    result = cli("consume", "t", "--partition", "x")
    assert result.exit_code == 1 and "'all'" in error_line(result)
    result = cli("consume", "t", "--partition", "3")
    assert result.exit_code == 1 and "has no partition 3" in error_line(result)


def test_consume_reads_large_logs_in_batches(cli: Cli) -> None:
    cli.ok("topic", "create", "t", "-p", "2", "-c", "segment.bytes=16384")
    cli.ok("produce", "t", input=lines(str(i) for i in range(3000)))
    out = jsonl(cli.ok("consume", "t").stdout)
    assert len(out) == 3000
    assert sorted(int(str(r["value"])) for r in out) == list(range(3000))


@pytest.mark.timeout(60)
def test_follow_tails_new_records(cli: Cli) -> None:
    cli.ok("topic", "create", "t")
    cli.ok("produce", "t", input="a\nb\n")
    done = threading.Event()

    def writer() -> None:  # another store (as another process would) appends while consume follows
        store = s3stream.open_store(cli.url, flush_interval_ms=20, probe=False)
        try:
            store.partition("t", 0).append([Record(None, b"c"), Record(None, b"d")])
            store.flush()
        finally:
            store.close()
            done.set()

    thread = threading.Timer(0.3, writer)
    thread.start()
    try:
        result = cli.ok("consume", "t", "--follow", "--from-beginning", "--max-records", "4", "--poll-ms", "20")
    finally:
        thread.join()
    assert done.is_set()
    assert [r["value"] for r in jsonl(result.stdout)] == ["a", "b", "c", "d"]
