"""BrokerConfig: Kafka's names and defaults, validation errors that say key, value and rule."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import pytest

from gregor.broker.config import DYNAMIC_BROKER_CONFIGS, SERVER_SETTINGS, BrokerConfig, Endpoint
from gregor.broker.properties import parse_override
from gregor.client.logs import JsonFormatter
from gregor.protocol.errors import InvalidConfigError
from gregor.storage.config import MANAGER_SETTINGS, TOPIC_SETTINGS, LogManagerConfig
from gregor.storage.settings import ConfigType, declared

BASE = {"broker.id": "1", "zookeeper.connect": "127.0.0.1:2181/kafka"}


def config(**changes: str) -> BrokerConfig:
    return BrokerConfig.from_properties(
        {**BASE, **{k.replace("_", "."): v for k, v in changes.items()}}
    )


def test_kafka_defaults() -> None:
    c = config()
    assert c.listeners == (Endpoint("PLAINTEXT", "", 9092),)
    assert c.advertised_listeners == c.listeners
    assert c.inter_broker_listener_name == "PLAINTEXT"
    assert (c.socket_request_max_bytes, c.message_max_bytes) == (104857600, 1048588)
    assert (c.num_partitions, c.default_replication_factor, c.min_insync_replicas) == (1, 1, 1)
    assert (c.replica_lag_time_max_ms, c.replica_fetch_wait_max_ms) == (30000, 500)
    assert (c.replica_fetch_max_bytes, c.num_replica_fetchers) == (1048576, 1)
    assert c.zookeeper_session_timeout_ms == c.zookeeper_connection_timeout_ms == 18000
    assert c.auto_create_topics_enable and c.delete_topic_enable and c.controlled_shutdown_enable
    assert c.auto_leader_rebalance_enable and not c.unclean_leader_election_enable
    assert c.offsets_topic_replication_factor == 3
    assert c.log_config.segment_bytes == 1 << 30
    assert c.log_config.retention_ms == 7 * 24 * 3600 * 1000
    assert c.log_manager_config.log_dirs == ("/tmp/kafka-logs",)


def test_log_settings_reach_storage() -> None:
    c = config(
        log_dirs="/a,/b",
        log_retention_hours="2",
        log_segment_bytes="1048576",
        message_max_bytes="5000",
        min_insync_replicas="2",
    )
    assert c.log_manager_config.log_dirs == ("/a", "/b")
    assert c.log_config.retention_ms == 2 * 3600 * 1000
    assert c.log_config.segment_bytes == 1048576
    assert c.log_config.max_message_bytes == 5000
    assert c.log_config.min_insync_replicas == 2


def test_server_assignors_the_first_the_default() -> None:
    assert config().group_consumer_assignors == ("uniform", "range")
    assert config(group_consumer_assignors="range, uniform").group_consumer_assignors == (
        "range",
        "uniform",
    )
    c = config(group_consumer_assignors="range")
    assert c.group_consumer_assignors == ("range",)
    with pytest.raises(InvalidConfigError) as raised:
        config(group_consumer_assignors="range,roundrobin")
    assert "group.consumer.assignors" in str(raised.value)
    assert "must list some of uniform, range" in str(raised.value)


def test_listeners_and_advertised_listeners() -> None:
    c = BrokerConfig.from_properties(
        {
            **BASE,
            "listeners": "PLAINTEXT://0.0.0.0:9092,INTERNAL://127.0.0.1:9093",
            "advertised.listeners": "PLAINTEXT://kafka-1.example:9092,INTERNAL://127.0.0.1:9093",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT",
            "inter.broker.listener.name": "INTERNAL",
        }
    )
    assert [str(e) for e in c.listeners] == [
        "PLAINTEXT://0.0.0.0:9092",
        "INTERNAL://127.0.0.1:9093",
    ]
    assert c.endpoint("PLAINTEXT") == Endpoint("PLAINTEXT", "kafka-1.example", 9092)
    assert c.inter_broker_listener_name == "INTERNAL"


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"broker.id": "x"}, "Invalid value 'x' for configuration broker.id: must be an integer"),
        ({"broker.id": "-1"}, "broker.id: must be set to a value of at least 0"),
        ({"num.partitions": "0"}, "num.partitions: must be at least 1"),
        ({"auto.create.topics.enable": "yes"}, "auto.create.topics.enable: must be true or false"),
        ({"leader.imbalance.per.broker.percentage": "101"}, "must be in [0, 100]"),
        ({"listeners": "PLAINTEXT//:9092"}, "is not of the form NAME://host:port"),
        ({"listeners": "PLAINTEXT://:1,PLAINTEXT://:2"}, "listener names must be unique"),
        (
            {"listeners": "PLAINTEXT://:9092,SSL://:9093"},
            "an SSL listener needs it, or ssl.keystore.certificate.chain and ssl.keystore.key",
        ),
        (
            {"listeners": "PLAINTEXT://:9092,SASL_PLAINTEXT://:9093"},
            "needs at least one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512",
        ),
        (
            {"listeners": "FOO://:9093"},
            "listener FOO has no entry in listener.security.protocol.map",
        ),
        (
            {
                "advertised.listeners": "OTHER://h:1",
                "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,OTHER:PLAINTEXT",
            },
            "listener OTHER is not one of listeners",
        ),
        ({"advertised.listeners": "PLAINTEXT://0.0.0.0:9092"}, "0.0.0.0 is a bind address"),
        ({"inter.broker.listener.name": "NOPE"}, "inter.broker.listener.name"),
        (
            {"replica.fetch.wait.max.ms": "40000"},
            "replica.fetch.wait.max.ms: must not exceed replica.socket.timeout.ms (30000)",
        ),
        ({"log.retention.ms": "-5"}, "Invalid value '-5' for configuration log.retention.ms"),
        ({"log.retention.hours": "x"}, "Invalid value 'x' for configuration log.retention.hours"),
        ({"log.dirs": "/a,/a"}, "Invalid value '/a,/a' for configuration log.dirs"),
        (
            {"log.cleanup.policy": "tidy"},
            "Invalid value 'tidy' for configuration log.cleanup.policy",
        ),
        ({"zookeeper.connect": ""}, "zookeeper.connect: must be set"),
    ],
)
def test_invalid_values_name_key_value_and_rule(changes: dict[str, str], message: str) -> None:
    with pytest.raises(InvalidConfigError) as raised:
        BrokerConfig.from_properties({**BASE, **changes})
    assert message in str(raised.value)


def test_unknown_keys_are_kept_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    c = config(some_plugin_setting="1")
    assert "The configuration 'some.plugin.setting' was supplied but isn't a known config." in (
        caplog.text
    )
    assert c.properties["some.plugin.setting"] == "1"


def test_load_with_overrides(tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    path.write_text(
        "# a comment\n"
        "broker.id = 7\n"
        "listeners: PLAINTEXT://127.0.0.1:19092\n"
        "zookeeper.connect=zk1:2181,\\\n    zk2:2181/kafka\n"
        "num.partitions 4\n"
    )
    c = BrokerConfig.load(path, ["num.partitions=6", "broker.rack=r1"])
    assert c.broker_id == 7
    assert c.zookeeper_connect == "zk1:2181,zk2:2181/kafka"
    assert c.listeners == (Endpoint("PLAINTEXT", "127.0.0.1", 19092),)
    assert (c.num_partitions, c.broker_rack) == (6, "r1")


def test_unreadable_file_and_bad_override(tmp_path: Path) -> None:
    with pytest.raises(InvalidConfigError, match="cannot read"):
        BrokerConfig.load(tmp_path / "missing.properties")
    with pytest.raises(InvalidConfigError, match="must have the form key=value"):
        parse_override("no-equals-sign")


def test_describe_lists_every_setting_with_its_source() -> None:
    described = {name: (value, default) for name, value, default in config().describe()}
    assert described["broker.id"] == ("1", False)
    assert described["num.partitions"] == ("1", True)
    assert described["advertised.listeners"] == (None, True)


def test_every_key_is_declared_once_with_a_doc() -> None:
    broker = {key for key, _ in declared(BrokerConfig).items()}
    storage = set(MANAGER_SETTINGS) | set(declared(LogManagerConfig))
    assert not broker & storage, "a key declared by the broker and by gregor-storage"
    for declaration in [*SERVER_SETTINGS.values(), *TOPIC_SETTINGS.values()]:
        assert declaration.doc, declaration.key
    assert {"log.retention.hours", "log.dirs", "broker.id", "num.io.threads"} <= set(
        SERVER_SETTINGS
    )


def test_declared_types_and_defaults() -> None:
    assert SERVER_SETTINGS["listeners"].default == "PLAINTEXT://:9092"
    assert SERVER_SETTINGS["log.retention.hours"].default == "168"
    assert SERVER_SETTINGS["log.retention.ms"].default is None
    assert SERVER_SETTINGS["log.retention.hours"].type == ConfigType.INT
    assert TOPIC_SETTINGS["cleanup.policy"].type == ConfigType.LIST
    assert TOPIC_SETTINGS["retention.ms"].type == ConfigType.LONG
    assert TOPIC_SETTINGS["compression.zstd.level"].type == ConfigType.INT
    assert (
        "log.retention.ms" in DYNAMIC_BROKER_CONFIGS and "broker.id" not in DYNAMIC_BROKER_CONFIGS
    )


def test_log_format_json_writes_one_object_per_line_and_the_prometheus_listener_parses() -> None:
    config = BrokerConfig.from_properties(
        {
            "broker.id": "0",
            "zookeeper.connect": "127.0.0.1:2181",
            "log.format": "json",
            "metrics.prometheus.listener": "http://127.0.0.1:9404",
        }
    )
    assert config.log_format == "json"
    assert config.metrics_prometheus_listener == ("127.0.0.1", 9404)
    for bad in ("127.0.0.1:9404", "http://127.0.0.1:99999", "https://h:1"):
        with pytest.raises(InvalidConfigError):
            BrokerConfig.from_properties(
                {"broker.id": "0", "zookeeper.connect": "z:1", "metrics.prometheus.listener": bad}
            )
    try:
        raise ValueError("boom")
    except ValueError:
        record = logging.LogRecord(
            "gregor.x", logging.ERROR, "f", 1, "a %s", ("b",), sys.exc_info()
        )
    line = JsonFormatter().format(record)
    assert "\n" not in line
    entry = json.loads(line)
    assert (entry["level"], entry["logger"], entry["message"]) == ("ERROR", "gregor.x", "a b")
    assert "ValueError: boom" in entry["exception"]
