"""Option parsing of the data source (pure): Kafka's names, defaults, sentinels and refusals."""

from __future__ import annotations

import pytest

from s3stream.apps.spark.options import EARLIEST, LATEST, parse_read_options, parse_write_options
from s3stream.base.errors import InvalidConfig


def test_batch_defaults_and_case_insensitivity() -> None:
    opts = parse_read_options({"URL": "file:///x", "Subscribe": "a, b"}, streaming=False)
    assert opts.url == "file:///x" and opts.topics == ("a", "b")
    assert opts.starting.default == EARLIEST and opts.ending.default == LATEST
    assert opts.fail_on_data_loss and opts.push_filters
    assert not opts.include_headers  # as Spark's Kafka source
    assert parse_read_options({"url": "u", "topic": "a", "includeHeaders": "TRUE"},
                              streaming=False).include_headers
    assert parse_read_options({"url": "u", "topic": "a"}, streaming=True).starting.default == LATEST


def test_json_offsets_and_timestamps() -> None:
    opts = parse_read_options({"url": "u", "subscribe": "t", "startingOffsets": '{"t": {"0": 5, "1": -2}}',
                               "endingOffsets": '{"t": {"0": -1, "2": 9}}',
                               "startingOffsetsByTimestamp": '{"t": {"3": 1000}}', "endingTimestamp": "77",
                               "maxOffsetsPerTrigger": "10", "failOnDataLoss": "FALSE"}, streaming=False)
    assert opts.starting.for_partition("t", 0) == 5
    assert opts.starting.for_partition("t", 1) == EARLIEST
    assert opts.starting.for_partition("t", 9) == EARLIEST  # missing: the default
    assert opts.ending.for_partition("t", 2) == 9 and opts.ending.for_partition("t", 0) == LATEST
    assert opts.starting_timestamps == {("t", 3): 1000} and opts.ending_timestamps == 77
    assert opts.max_offsets_per_trigger == 10 and not opts.fail_on_data_loss


@pytest.mark.parametrize(("options", "streaming", "named"), [
    ({"subscribe": "t"}, False, "url"),
    ({"url": "u"}, False, "subscribe"),
    ({"url": "u", "subscribe": "t", "assign": '{"t": [0]}'}, False, "subscribe"),
    ({"url": "u", "subscribe": "t", "startingOffsets": "latest"}, False, "startingOffsets"),
    ({"url": "u", "subscribe": "t", "endingOffsets": '{"t": {"0": -2}}'}, False, "endingOffsets"),
    ({"url": "u", "subscribe": "t", "endingOffsets": "latest"}, True, "endingOffsets"),
    ({"url": "u", "subscribe": "t", "startingOffsets": "{not json"}, False, "startingOffsets"),
    ({"url": "u", "subscribe": "t", "startingOffsets": '{"t": {"x": 1}}'}, False, "startingOffsets"),
    ({"url": "u", "subscribe": "t", "startingOffsets": '{"t": {"0": -3}}'}, False, "startingOffsets"),
    ({"url": "u", "subscribePattern": "("}, False, "subscribePattern"),
    ({"url": "u", "assign": '{"t": ["a"]}'}, False, "assign"),
    ({"url": "u", "subscribe": "t", "maxOffsetsPerTrigger": "0"}, True, "maxOffsetsPerTrigger"),
    ({"url": "u", "subscribe": "t", "failOnDataLoss": "maybe"}, True, "failOnDataLoss"),
    ({"url": "u", "subscribe": "t", "startingOffsetsByTimestampStrategy": "x"}, True, "Strategy"),
])
def test_bad_options_are_refused_by_name(options: dict[str, str], streaming: bool, named: str) -> None:
    with pytest.raises(InvalidConfig, match=named):
        parse_read_options(options, streaming=streaming)


def test_write_options_writer_id() -> None:
    assert parse_write_options({"url": "u", "topic": "t", "writerId": "w1"}).writer_id == "w1"
    a = parse_write_options({"url": "u", "checkpointLocation": "/tmp/ck"}).writer_id
    b = parse_write_options({"url": "u", "checkpointLocation": "/tmp/other"}).writer_id
    assert a is not None and b is not None and a != b and a.startswith("checkpoint-")
    assert parse_write_options({"url": "u"}).writer_id is None
