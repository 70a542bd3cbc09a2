"""BrokerConfig: a broker's settings under Kafka's names, with Kafka's defaults.

Loaded from a `server.properties` file plus `--override key=value` pairs and validated at
once; an error (`InvalidConfigError`) names the key, the value and the rule. The `log.*`
settings (and the topic defaults a broker gives: `message.max.bytes`,
`min.insync.replicas`, ...) are handed to gregor-storage, which validates them the same way
and turns them into the default topic `LogConfig` and the `LogManagerConfig`.

A key nobody knows is kept and logged once, as Kafka does ("supplied but isn't a known
config"), so a server.properties written for Kafka starts unchanged.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Final

import attrs

from gregor.broker.properties import load_properties, parse_override
from gregor.protocol.errors import InvalidConfigError
from gregor.storage.config import LogConfig, LogManagerConfig

log = logging.getLogger(__name__)

INT_MAX: Final = 2**31 - 1
LONG_MAX: Final = 2**63 - 1
SECURITY_PROTOCOLS: Final = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SUPPORTED_SECURITY_PROTOCOLS: Final = ("PLAINTEXT",)


def config_error(key: str, value: object, rule: str) -> InvalidConfigError:
    return InvalidConfigError(f"Invalid value {value!r} for configuration {key}: {rule}")


@attrs.frozen(slots=True)
class Endpoint:
    """One listener: `NAME://host:port`; an empty host binds every interface."""

    listener: str
    host: str
    port: int
    security_protocol: str = "PLAINTEXT"

    def __str__(self) -> str:
        return f"{self.listener}://{self.host}:{self.port}"


Parser = Callable[[str, str], Any]


def _integer(low: int, high: int) -> Parser:
    def parse(key: str, text: str) -> int:
        try:
            value = int(text.strip())
        except ValueError:
            raise config_error(key, text, "must be an integer") from None
        if not low <= value <= high:
            bound = f"at least {low}" if high in (INT_MAX, LONG_MAX) else f"in [{low}, {high}]"
            raise config_error(key, text, f"must be {bound}")
        return value

    return parse


def _boolean(key: str, text: str) -> bool:
    lowered = text.strip().lower()
    if lowered not in ("true", "false"):
        raise config_error(key, text, "must be true or false")
    return lowered == "true"


def _string(key: str, text: str) -> str:
    return text.strip()


def _optional_string(key: str, text: str) -> str | None:
    return text.strip() or None


_LISTENER = re.compile(
    r"^(?P<name>[A-Za-z0-9_.-]+)://(?P<host>\[[^\]]*\]|[^:\[\]]*):(?P<port>\d+)$"
)


def parse_endpoints(key: str, text: str) -> tuple[Endpoint, ...]:
    """`NAME://host:port,...` with the security protocol yet to be resolved."""
    endpoints = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        match = _LISTENER.match(item)
        if match is None:
            raise config_error(key, text, f"{item!r} is not of the form NAME://host:port")
        port = int(match["port"])
        if port > 65535:
            raise config_error(key, text, f"port {port} of {item!r} is not in [0, 65535]")
        host = match["host"].strip("[]")
        endpoints.append(Endpoint(match["name"].upper(), host, port))
    names = [e.listener for e in endpoints]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise config_error(key, text, f"listener names must be unique, {duplicates} repeat")
    return tuple(endpoints)


def _optional_endpoints(key: str, text: str) -> tuple[Endpoint, ...] | None:
    return parse_endpoints(key, text) if text.strip() else None


def _protocol_map(key: str, text: str) -> dict[str, str]:
    out = {}
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        name, sep, protocol = item.partition(":")
        protocol = protocol.strip().upper()
        if not sep or protocol not in SECURITY_PROTOCOLS:
            rule = f"{item!r} must be LISTENER:PROTOCOL with PROTOCOL in {SECURITY_PROTOCOLS}"
            raise config_error(key, text, rule)
        out[name.strip().upper()] = protocol
    return out


# Kafka name -> (attribute, parser, Kafka's default as text; None: no default).
SETTINGS: Final[dict[str, tuple[str, Parser, str | None]]] = {
    # identity and network
    "broker.id": ("broker_id", _integer(-1, INT_MAX), "-1"),
    "listeners": ("listeners", parse_endpoints, "PLAINTEXT://:9092"),
    "advertised.listeners": ("advertised_listeners", _optional_endpoints, None),
    "listener.security.protocol.map": (
        "listener_security_protocol_map",
        _protocol_map,
        ",".join(f"{p}:{p}" for p in SECURITY_PROTOCOLS),
    ),
    "inter.broker.listener.name": ("inter_broker_listener_name", _optional_string, None),
    "security.inter.broker.protocol": ("security_inter_broker_protocol", _string, "PLAINTEXT"),
    "broker.rack": ("broker_rack", _optional_string, None),
    "socket.request.max.bytes": ("socket_request_max_bytes", _integer(1, INT_MAX), "104857600"),
    "socket.send.buffer.bytes": ("socket_send_buffer_bytes", _integer(-1, INT_MAX), "102400"),
    "socket.receive.buffer.bytes": (
        "socket_receive_buffer_bytes",
        _integer(-1, INT_MAX),
        "102400",
    ),
    "connections.max.idle.ms": ("connections_max_idle_ms", _integer(-1, LONG_MAX), "600000"),
    "fetch.max.bytes": ("fetch_max_bytes", _integer(1024, INT_MAX), "57671680"),
    # ZooKeeper
    "zookeeper.connect": ("zookeeper_connect", _string, None),
    "zookeeper.session.timeout.ms": ("zookeeper_session_timeout_ms", _integer(1, INT_MAX), "18000"),
    "zookeeper.connection.timeout.ms": (
        "zookeeper_connection_timeout_ms",
        _integer(1, INT_MAX),
        None,
    ),
    # topics
    "num.partitions": ("num_partitions", _integer(1, INT_MAX), "1"),
    "default.replication.factor": ("default_replication_factor", _integer(1, INT_MAX), "1"),
    "min.insync.replicas": ("min_insync_replicas", _integer(1, INT_MAX), "1"),
    "unclean.leader.election.enable": ("unclean_leader_election_enable", _boolean, "false"),
    "auto.create.topics.enable": ("auto_create_topics_enable", _boolean, "true"),
    "delete.topic.enable": ("delete_topic_enable", _boolean, "true"),
    "message.max.bytes": ("message_max_bytes", _integer(0, INT_MAX), "1048588"),
    "offsets.topic.replication.factor": (
        "offsets_topic_replication_factor",
        _integer(1, 32767),
        "3",
    ),
    "offsets.topic.num.partitions": ("offsets_topic_num_partitions", _integer(1, INT_MAX), "50"),
    # the group coordinator and __consumer_offsets
    "offsets.topic.segment.bytes": (
        "offsets_topic_segment_bytes",
        _integer(1, INT_MAX),
        "104857600",
    ),
    "offsets.load.buffer.size": ("offsets_load_buffer_size", _integer(1, INT_MAX), "5242880"),
    "offsets.commit.timeout.ms": ("offsets_commit_timeout_ms", _integer(1, INT_MAX), "5000"),
    "offsets.retention.minutes": ("offsets_retention_minutes", _integer(1, INT_MAX), "10080"),
    "offsets.retention.check.interval.ms": (
        "offsets_retention_check_interval_ms",
        _integer(1, LONG_MAX),
        "600000",
    ),
    "offset.metadata.max.bytes": ("offset_metadata_max_bytes", _integer(0, INT_MAX), "4096"),
    "group.min.session.timeout.ms": ("group_min_session_timeout_ms", _integer(0, INT_MAX), "6000"),
    "group.max.session.timeout.ms": (
        "group_max_session_timeout_ms",
        _integer(0, INT_MAX),
        "1800000",
    ),
    "group.initial.rebalance.delay.ms": (
        "group_initial_rebalance_delay_ms",
        _integer(0, INT_MAX),
        "3000",
    ),
    "group.max.size": ("group_max_size", _integer(1, INT_MAX), "2147483647"),
    # __transaction_state (created for FindCoordinator; its coordinator comes later)
    "transaction.state.log.num.partitions": (
        "transaction_state_log_num_partitions",
        _integer(1, INT_MAX),
        "50",
    ),
    "transaction.state.log.replication.factor": (
        "transaction_state_log_replication_factor",
        _integer(1, 32767),
        "3",
    ),
    "transaction.state.log.min.isr": ("transaction_state_log_min_isr", _integer(1, INT_MAX), "2"),
    "transaction.state.log.segment.bytes": (
        "transaction_state_log_segment_bytes",
        _integer(1, INT_MAX),
        "104857600",
    ),
    # replication
    "replica.lag.time.max.ms": ("replica_lag_time_max_ms", _integer(0, LONG_MAX), "30000"),
    "replica.fetch.wait.max.ms": ("replica_fetch_wait_max_ms", _integer(0, INT_MAX), "500"),
    "replica.fetch.max.bytes": ("replica_fetch_max_bytes", _integer(0, INT_MAX), "1048576"),
    "replica.fetch.min.bytes": ("replica_fetch_min_bytes", _integer(1, INT_MAX), "1"),
    "replica.fetch.response.max.bytes": (
        "replica_fetch_response_max_bytes",
        _integer(0, INT_MAX),
        "10485760",
    ),
    "replica.fetch.backoff.ms": ("replica_fetch_backoff_ms", _integer(0, INT_MAX), "1000"),
    "replica.socket.timeout.ms": ("replica_socket_timeout_ms", _integer(1, INT_MAX), "30000"),
    "num.replica.fetchers": ("num_replica_fetchers", _integer(1, INT_MAX), "1"),
    "replica.high.watermark.checkpoint.interval.ms": (
        "replica_high_watermark_checkpoint_interval_ms",
        _integer(1, LONG_MAX),
        "5000",
    ),
    # leadership
    "controlled.shutdown.enable": ("controlled_shutdown_enable", _boolean, "true"),
    "controlled.shutdown.max.retries": (
        "controlled_shutdown_max_retries",
        _integer(0, INT_MAX),
        "3",
    ),
    "controlled.shutdown.retry.backoff.ms": (
        "controlled_shutdown_retry_backoff_ms",
        _integer(0, LONG_MAX),
        "5000",
    ),
    "auto.leader.rebalance.enable": ("auto_leader_rebalance_enable", _boolean, "true"),
    "leader.imbalance.check.interval.seconds": (
        "leader_imbalance_check_interval_seconds",
        _integer(1, LONG_MAX),
        "300",
    ),
    "leader.imbalance.per.broker.percentage": (
        "leader_imbalance_per_broker_percentage",
        _integer(0, 100),
        "10",
    ),
    "controller.socket.timeout.ms": ("controller_socket_timeout_ms", _integer(1, INT_MAX), "30000"),
    # gregor's own: how often the in-process metrics are logged (0: never)
    "gregor.metrics.log.interval.ms": ("metrics_log_interval_ms", _integer(0, LONG_MAX), "60000"),
}

# Kafka settings accepted and deliberately without effect here (threads, buffers, JMX, ...).
IGNORED: Final = frozenset(
    {
        "num.network.threads",
        "num.io.threads",
        "queued.max.requests",
        "num.recovery.threads.per.data.dir",
        "zookeeper.max.in.flight.requests",
        "zookeeper.set.acl",
        "inter.broker.protocol.version",
        "log.message.format.version",
    }
)


def _attr_defaults() -> dict[str, Any]:
    return {
        attr: (parse(key, default) if default is not None else None)
        for key, (attr, parse, default) in SETTINGS.items()
    }


@attrs.frozen(slots=True)
class BrokerConfig:
    """A validated broker configuration. Build it with `load` or `from_properties`."""

    broker_id: int
    listeners: tuple[Endpoint, ...]
    advertised_listeners: tuple[Endpoint, ...]
    listener_security_protocol_map: Mapping[str, str]
    inter_broker_listener_name: str
    security_inter_broker_protocol: str
    broker_rack: str | None
    socket_request_max_bytes: int
    socket_send_buffer_bytes: int
    socket_receive_buffer_bytes: int
    connections_max_idle_ms: int
    fetch_max_bytes: int
    zookeeper_connect: str
    zookeeper_session_timeout_ms: int
    zookeeper_connection_timeout_ms: int
    num_partitions: int
    default_replication_factor: int
    min_insync_replicas: int
    unclean_leader_election_enable: bool
    auto_create_topics_enable: bool
    delete_topic_enable: bool
    message_max_bytes: int
    offsets_topic_replication_factor: int
    offsets_topic_num_partitions: int
    offsets_topic_segment_bytes: int
    offsets_load_buffer_size: int
    offsets_commit_timeout_ms: int
    offsets_retention_minutes: int
    offsets_retention_check_interval_ms: int
    offset_metadata_max_bytes: int
    group_min_session_timeout_ms: int
    group_max_session_timeout_ms: int
    group_initial_rebalance_delay_ms: int
    group_max_size: int
    transaction_state_log_num_partitions: int
    transaction_state_log_replication_factor: int
    transaction_state_log_min_isr: int
    transaction_state_log_segment_bytes: int
    replica_lag_time_max_ms: int
    replica_fetch_wait_max_ms: int
    replica_fetch_max_bytes: int
    replica_fetch_min_bytes: int
    replica_fetch_response_max_bytes: int
    replica_fetch_backoff_ms: int
    replica_socket_timeout_ms: int
    num_replica_fetchers: int
    replica_high_watermark_checkpoint_interval_ms: int
    controlled_shutdown_enable: bool
    controlled_shutdown_max_retries: int
    controlled_shutdown_retry_backoff_ms: int
    auto_leader_rebalance_enable: bool
    leader_imbalance_check_interval_seconds: int
    leader_imbalance_per_broker_percentage: int
    controller_socket_timeout_ms: int
    metrics_log_interval_ms: int
    # gregor-storage's view of the same properties
    log_config: LogConfig
    log_manager_config: LogManagerConfig
    # every property as given (file, then overrides), for DescribeConfigs and storage
    properties: Mapping[str, str] = attrs.field(factory=dict, eq=False)

    @classmethod
    def load(cls, path: Path | str, overrides: Iterable[str] = ()) -> BrokerConfig:
        """A server.properties file with `key=value` overrides applied on top."""
        properties = load_properties(Path(path))
        for item in overrides:
            key, value = parse_override(item)
            properties[key] = value
        return cls.from_properties(properties)

    @classmethod
    def from_properties(cls, properties: Mapping[str, object]) -> BrokerConfig:
        given = {str(k).strip(): str(v) for k, v in properties.items()}
        values = _attr_defaults()
        for key, text in given.items():
            setting = SETTINGS.get(key)
            if setting is not None:
                attr, parse, _ = setting
                values[attr] = parse(key, text)
            elif key not in IGNORED and not key.startswith("log."):
                log.warning("The configuration %r was supplied but isn't a known config.", key)
        _resolve_listeners(values, given)
        _check_relations(values)
        values["log_config"] = LogConfig.from_server_properties(given)
        values["log_manager_config"] = LogManagerConfig.from_server_properties(given)
        if values["zookeeper_connection_timeout_ms"] is None:
            values["zookeeper_connection_timeout_ms"] = values["zookeeper_session_timeout_ms"]
        return cls(properties=given, **values)

    def with_overrides(self, changes: Mapping[str, str]) -> BrokerConfig:
        """This configuration with some properties changed (validated again as a whole)."""
        return self.from_properties({**self.properties, **changes})

    def endpoint(self, listener: str) -> Endpoint | None:
        """The advertised endpoint of a listener."""
        return next((e for e in self.advertised_listeners if e.listener == listener), None)

    def describe(self) -> list[tuple[str, str | None, bool]]:
        """(name, value as text, is it the default) for every setting this broker knows."""
        out: list[tuple[str, str | None, bool]] = []
        for key, (_attr, _parse, default) in SETTINGS.items():
            if key in self.properties:
                out.append((key, self.properties[key], False))
            else:
                out.append((key, default, True))
        return out


def _resolve_listeners(values: dict[str, Any], given: Mapping[str, str]) -> None:
    protocols: Mapping[str, str] = values["listener_security_protocol_map"]

    def resolve(key: str, endpoints: tuple[Endpoint, ...]) -> tuple[Endpoint, ...]:
        out = []
        for e in endpoints:
            protocol = protocols.get(e.listener)
            if protocol is None:
                raise config_error(
                    key,
                    given.get(key, ""),
                    f"listener {e.listener} has no entry in listener.security.protocol.map",
                )
            if protocol not in SUPPORTED_SECURITY_PROTOCOLS:
                raise config_error(
                    key,
                    given.get(key, ""),
                    f"listener {e.listener} uses {protocol}; only PLAINTEXT is supported",
                )
            out.append(attrs.evolve(e, security_protocol=protocol))
        return tuple(out)

    listeners = resolve("listeners", values["listeners"])
    if not listeners:
        raise config_error("listeners", given.get("listeners", ""), "must name at least one")
    ports = [e.port for e in listeners if e.port]
    if len(set(ports)) != len(ports):
        raise config_error("listeners", given.get("listeners", ""), "each needs its own port")
    advertised = values["advertised_listeners"]
    advertised = listeners if advertised is None else resolve("advertised.listeners", advertised)
    names = {e.listener for e in listeners}
    for e in advertised:
        if e.listener not in names:
            raise config_error(
                "advertised.listeners",
                given.get("advertised.listeners", ""),
                f"listener {e.listener} is not one of listeners {sorted(names)}",
            )
        if e.host == "0.0.0.0":
            raise config_error(
                "advertised.listeners",
                given.get("advertised.listeners", given.get("listeners", "")),
                "0.0.0.0 is a bind address, not one clients can connect to",
            )
    inter = values["inter_broker_listener_name"]
    if inter is None:
        inter = values["security_inter_broker_protocol"].upper()
    inter = inter.upper()
    if inter not in {e.listener for e in advertised}:
        raise config_error(
            "inter.broker.listener.name",
            inter,
            f"must be one of the advertised listeners {sorted(e.listener for e in advertised)}",
        )
    values["listeners"] = listeners
    values["advertised_listeners"] = advertised
    values["inter_broker_listener_name"] = inter


def _check_relations(values: dict[str, Any]) -> None:
    if values["broker_id"] < 0:
        raise config_error(
            "broker.id",
            values["broker_id"],
            "must be set to a value of at least 0 (automatic broker ids are not supported)",
        )
    if not values["zookeeper_connect"]:
        raise config_error("zookeeper.connect", values["zookeeper_connect"], "must be set")
    wait = values["replica_fetch_wait_max_ms"]
    if wait > values["replica_socket_timeout_ms"]:
        raise config_error(
            "replica.fetch.wait.max.ms",
            wait,
            f"must not exceed replica.socket.timeout.ms ({values['replica_socket_timeout_ms']})",
        )
    if wait > values["replica_lag_time_max_ms"]:
        raise config_error(
            "replica.fetch.wait.max.ms",
            wait,
            f"must not exceed replica.lag.time.max.ms ({values['replica_lag_time_max_ms']})",
        )
