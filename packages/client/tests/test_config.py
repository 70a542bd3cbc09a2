"""Config dicts: Kafka's names, the Java client's defaults, and errors that say what is wrong."""

from __future__ import annotations

from typing import Any

import pytest

from gregor.client.config import AdminConfig, ConfigError, ConsumerConfig, ProducerConfig

BASE = {"bootstrap.servers": "127.0.0.1:9092"}


def producer(**extra: Any) -> ProducerConfig:
    return ProducerConfig.from_dict({**BASE, **{k.replace("_", "."): v for k, v in extra.items()}})


def test_java_defaults() -> None:
    config = ProducerConfig.from_dict(BASE)
    assert config.acks == -1
    assert (config.linger_ms, config.batch_size, config.buffer_memory) == (0, 16384, 33554432)
    assert (config.delivery_timeout_ms, config.max_block_ms) == (120_000, 60_000)
    assert config.retries == 2**31 - 1
    assert config.enable_idempotence is True and config.idempotence_required is False
    assert config.client_id.startswith("producer-")
    consumer = ConsumerConfig.from_dict({**BASE, "group.id": "g"})
    assert consumer.auto_offset_reset == "latest"
    assert consumer.partition_assignment_strategy == ("range", "cooperative-sticky")
    assert (consumer.session_timeout_ms, consumer.heartbeat_interval_ms) == (45_000, 3000)
    assert (consumer.max_poll_records, consumer.fetch_max_wait_ms) == (500, 500)
    assert consumer.client_id.startswith("consumer-g-")
    assert AdminConfig.from_dict(BASE).client_id.startswith("adminclient-")


def test_values_in_java_string_form_and_python_form() -> None:
    config = ProducerConfig.from_dict(
        {
            "bootstrap.servers": "a:1, b:2",
            "acks": "1",
            "linger.ms": "7",
            "enable.idempotence": "false",
            "client.id": "me",
        }
    )
    assert config.bootstrap_servers == ("a:1", "b:2")
    assert (config.acks, config.linger_ms, config.enable_idempotence) == (1, 7, False)
    assert config.client_id == "me"
    assert ProducerConfig.from_dict({"bootstrap.servers": ["a:1"], "acks": "all"}).acks == -1
    assert config.get("linger.ms") == 7


@pytest.mark.parametrize(
    ("key", "suggestion"),
    [("linger.m", "linger.ms"), ("bootstrap.server", "bootstrap.servers"), ("ack", "acks")],
)
def test_unknown_keys_suggest_the_closest_name(key: str, suggestion: str) -> None:
    with pytest.raises(
        ConfigError, match=f"unknown producer config '{key}'; did you mean '{suggestion}'"
    ):
        ProducerConfig.from_dict({**BASE, key: "1"})


def test_unknown_key_without_a_close_name() -> None:
    with pytest.raises(ConfigError, match=r"unknown consumer config 'zzz'$"):
        ConsumerConfig.from_dict({**BASE, "zzz": 1})


@pytest.mark.parametrize(
    ("key", "value", "rule"),
    [
        ("acks", "2", "must be all, -1, 0 or 1"),
        ("linger.ms", -1, "must be at least 0"),
        ("linger.ms", "soon", "must be an integer"),
        ("batch.size", True, "must be an integer"),
        ("compression.type", "brotli", "must be one of none, gzip, snappy, lz4, zstd"),
        ("enable.idempotence", "maybe", "must be true or false"),
        ("max.in.flight.requests.per.connection", 0, "must be at least 1"),
        ("partitioner", "crc", "must be one of murmur2_random"),
    ],
)
def test_bad_values_name_key_value_and_rule(key: str, value: Any, rule: str) -> None:
    with pytest.raises(ConfigError) as info:
        ProducerConfig.from_dict({**BASE, key: value})
    assert str(info.value).startswith(f"{key}={value!r}: {rule}")


def test_bootstrap_servers_are_required_and_checked() -> None:
    with pytest.raises(ConfigError, match=r"at least one host:port"):
        ProducerConfig.from_dict({})
    with pytest.raises(ConfigError, match=r"'nohost' is not host:port"):
        ProducerConfig.from_dict({"bootstrap.servers": "nohost"})
    with pytest.raises(ConfigError, match=r"must be a dict"):
        ProducerConfig.from_dict("a:1")  # type: ignore[arg-type]


def test_idempotence_yields_to_conflicting_settings_unless_asked_for() -> None:
    assert producer(acks="1").enable_idempotence is False
    assert producer(**{"max.in.flight.requests.per.connection": 6}).enable_idempotence is False
    with pytest.raises(ConfigError, match=r"enable.idempotence=true: acks must be all"):
        ProducerConfig.from_dict({**BASE, "acks": "1", "enable.idempotence": "true"})
    explicit = ProducerConfig.from_dict({**BASE, "enable.idempotence": True})
    assert explicit.idempotence_required is True
    transactional = ProducerConfig.from_dict({**BASE, "transactional.id": "t1"})
    assert transactional.idempotence_required and transactional.client_id == "producer-t1"
    with pytest.raises(ConfigError, match=r"transactional.id needs enable.idempotence"):
        ProducerConfig.from_dict({**BASE, "transactional.id": "t", "enable.idempotence": False})


def test_delivery_timeout_covers_linger_and_request_timeout() -> None:
    assert producer(**{"linger.ms": 100, "delivery.timeout.ms": 30_100}).delivery_timeout_ms == (
        30_100
    )
    with pytest.raises(ConfigError, match=r"must be at least linger.ms \+ request.timeout.ms"):
        producer(**{"linger.ms": 100, "delivery.timeout.ms": 30_000})
    # Not given: raised to the minimum, as the Java client does.
    assert producer(**{"request.timeout.ms": 200_000}).delivery_timeout_ms == 200_000


def test_consumer_rules() -> None:
    with pytest.raises(ConfigError, match=r"heartbeat.interval.ms=45000 must be lower"):
        ConsumerConfig.from_dict({**BASE, "heartbeat.interval.ms": 45_000})
    with pytest.raises(ConfigError, match=r"group.instance.id needs a group.id"):
        ConsumerConfig.from_dict({**BASE, "group.instance.id": "i"})
    assert ConsumerConfig.from_dict(BASE).enable_auto_commit is False  # no group
    with pytest.raises(ConfigError, match=r"enable.auto.commit=true needs a group.id"):
        ConsumerConfig.from_dict({**BASE, "enable.auto.commit": True})
    with pytest.raises(ConfigError, match=r"must be one of earliest, latest, none"):
        ConsumerConfig.from_dict({**BASE, "auto.offset.reset": "smallest"})
    strategies = ConsumerConfig.from_dict(
        {
            **BASE,
            "partition.assignment.strategy": "org.apache.kafka.clients.consumer.StickyAssignor,"
            "roundrobin",
        }
    ).partition_assignment_strategy
    assert strategies == ("sticky", "roundrobin")
    with pytest.raises(ConfigError, match=r"partition.assignment.strategy='fair'"):
        ConsumerConfig.from_dict({**BASE, "partition.assignment.strategy": "fair"})
