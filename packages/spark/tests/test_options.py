"""The source's options: spark-sql-kafka's names, defaults and refusals."""

from __future__ import annotations

import pytest

from gregor.spark.options import (
    Assign,
    Bound,
    OptionError,
    Subscribe,
    SubscribePattern,
    client_config,
    read_options,
)

BASE = {"kafka.bootstrap.servers": "127.0.0.1:9092", "subscribe": "a"}


def test_defaults_batch_and_streaming() -> None:
    batch = read_options(BASE, streaming=False)
    assert batch.starting == Bound("earliest")
    assert batch.ending == Bound("latest")
    assert batch.fail_on_data_loss is True
    assert batch.include_headers is False
    assert batch.client == {"bootstrap.servers": "127.0.0.1:9092"}
    stream = read_options(BASE, streaming=True)
    assert stream.starting == Bound("latest")
    assert stream.ending is None


def test_names_are_case_insensitive_and_kafka_options_pass_through() -> None:
    options = read_options(
        {
            "KAFKA.bootstrap.servers": "h:1",
            "kafka.isolation.level": "read_committed",
            "SubscribePattern": "orders-.*",
            "FAILONDATALOSS": "false",
            "includeHeaders": "TRUE",
            "minPartitions": "7",
            "maxRecordsPerPartition": "100",
            "maxOffsetsPerTrigger": "5",
        },
        streaming=False,
    )
    assert options.client == {"bootstrap.servers": "h:1", "isolation.level": "read_committed"}
    assert options.strategy == SubscribePattern("orders-.*")
    assert (options.fail_on_data_loss, options.include_headers) == (False, True)
    assert (options.min_partitions, options.max_records_per_partition) == (7, 100)
    assert options.max_offsets_per_trigger == 5


def test_strategies() -> None:
    assert read_options(BASE | {"subscribe": " a, b ,"}, streaming=False).strategy == Subscribe(
        ("a", "b")
    )
    assign = read_options(
        {"kafka.bootstrap.servers": "h:1", "assign": '{"a":[0,2],"b":[1]}'}, streaming=False
    )
    assert assign.strategy == Assign((("a", 0), ("a", 2), ("b", 1)))
    assert assign.topics_known == ("a", "b")
    assert SubscribePattern("t.*").matches("topic") and not SubscribePattern("t").matches("tt")


@pytest.mark.parametrize(
    "options",
    [
        {"kafka.bootstrap.servers": "h:1"},
        BASE | {"assign": '{"a":[0]}'},
        BASE | {"subscribe": " , "},
        {"kafka.bootstrap.servers": "h:1", "assign": '["a"]'},
        {"kafka.bootstrap.servers": "h:1", "subscribePattern": "("},
    ],
)
def test_exactly_one_valid_strategy(options: dict[str, str]) -> None:
    with pytest.raises(OptionError):
        read_options(options, streaming=False)


def test_bootstrap_servers_required() -> None:
    with pytest.raises(OptionError, match=r"kafka\.bootstrap\.servers"):
        read_options({"subscribe": "a"}, streaming=False)


@pytest.mark.parametrize(
    "name",
    ["auto.offset.reset", "key.deserializer", "value.deserializer", "enable.auto.commit"],
)
def test_options_the_source_owns_are_refused(name: str) -> None:
    with pytest.raises(OptionError, match=name):
        client_config({"kafka.bootstrap.servers": "h:1", f"kafka.{name}": "x"})


def test_json_offsets_and_timestamps() -> None:
    options = read_options(
        BASE
        | {
            "startingOffsets": '{"a":{"0":23,"1":-2}}',
            "endingOffsets": '{"a":{"0":-1,"1":50}}',
        },
        streaming=False,
    )
    assert options.starting == Bound("offsets", {("a", 0): 23, ("a", 1): -2})
    assert options.ending == Bound("offsets", {("a", 0): -1, ("a", 1): 50})
    # startingTimestamp wins over startingOffsetsByTimestamp, which wins over startingOffsets.
    both = read_options(
        BASE
        | {
            "startingTimestamp": "1000",
            "startingOffsetsByTimestamp": '{"a":{"0":5}}',
            "startingOffsets": "earliest",
        },
        streaming=False,
    )
    assert both.starting == Bound("timestamp", timestamp=1000)
    by_partition = read_options(
        BASE | {"endingOffsetsByTimestamp": '{"a":{"0":5}}'}, streaming=False
    )
    assert by_partition.ending == Bound("timestamps", {("a", 0): 5})


@pytest.mark.parametrize(
    ("extra", "streaming", "message"),
    [
        ({"startingOffsets": "latest"}, False, "can't be 'latest'"),
        ({"startingOffsets": '{"a":{"0":-1}}'}, False, "can't be latest"),
        ({"endingOffsets": "earliest"}, False, "can't be 'earliest'"),
        ({"endingOffsets": '{"a":{"0":-2}}'}, False, "can't be earliest"),
        ({"endingOffsets": "latest"}, True, "not valid in streaming"),
        ({"startingOffsets": "first"}, False, "must be 'earliest', 'latest' or JSON"),
        ({"startingOffsets": '{"a":{"x":1}}'}, False, "must be JSON like"),
        ({"startingOffsets": '{"a":{"0":-3}}'}, False, "use -2 for earliest"),
        ({"startingTimestamp": "yesterday"}, False, "milliseconds"),
        ({"failOnDataLoss": "maybe"}, False, "true or false"),
        ({"minPartitions": "0"}, False, "positive integer"),
        ({"startingOffsetsByTimestampStrategy": "sometimes"}, False, "'error' or 'latest'"),
    ],
)
def test_invalid_values(extra: dict[str, str], streaming: bool, message: str) -> None:
    with pytest.raises(OptionError, match=message):
        read_options(BASE | extra, streaming=streaming)
