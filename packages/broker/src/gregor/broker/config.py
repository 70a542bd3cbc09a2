"""BrokerConfig: a broker's settings under Kafka's names, with Kafka's defaults.

Loaded from a `server.properties` file plus `--override key=value` pairs and validated at
once; an error (`InvalidConfigError`) names the key, the value and the rule. The `log.*`
settings (and the topic defaults a broker gives: `message.max.bytes`,
`min.insync.replicas`, ...) are gregor-storage's, which declares and validates them and turns
them into the default topic `LogConfig` and the `LogManagerConfig`.

Each setting is declared once, as a field with its key, default, parser and doc
(`gregor.storage.settings`); `SERVER_SETTINGS` below is every server key a broker reads, for
DescribeConfigs and the configuration reference.

A key nobody knows is kept and logged once, as Kafka does ("supplied but isn't a known
config"), so a server.properties written for Kafka starts unchanged.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final

import attrs

from gregor.broker.properties import load_properties, parse_override
from gregor.broker.security.listeners import (
    ListenerSecurity,
    inter_broker_security,
    listener_security,
)
from gregor.broker.security.passwords import (
    AES_KEY_LENGTHS,
    CIPHER_ALGORITHMS,
    KEY_FACTORY_ALGORITHMS,
    PasswordEncoder,
)
from gregor.client.security import SASL_MECHANISMS, ClientSecurity
from gregor.storage.config import MANAGER_SETTINGS, SYNONYM_SETTINGS, LogConfig, LogManagerConfig
from gregor.storage.settings import (
    INT_MAX,
    LONG_MAX,
    ConfigType,
    Parser,
    Setting,
    accepted,
    boolean,
    choice,
    config_error,
    declared,
    integer,
    long,
    optional_string,
    password,
    setting,
    short,
    string,
)

log = logging.getLogger(__name__)

# What `replica.selector.class` accepts besides none (gregor.broker.replica_selector).
REPLICA_SELECTOR_CLASSES: Final = (
    "org.apache.kafka.common.replica.RackAwareReplicaSelector",
    "org.apache.kafka.common.replica.LeaderSelector",
)
SECURITY_PROTOCOLS: Final = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
LISTENER_PREFIX: Final = "listener.name."
# What `authorizer.class.name` accepts: Kafka's names of its ZooKeeper authorizer, and ours.
AUTHORIZER_CLASS_NAMES: Final = (
    "kafka.security.authorizer.AclAuthorizer",
    "kafka.security.auth.SimpleAclAuthorizer",
    "gregor.broker.security.acl_authorizer.AclAuthorizer",
)


SERVER_ASSIGNORS = ("uniform", "range")


def _server_assignors(key: str, value: object) -> tuple[str, ...]:
    items = value.split(",") if isinstance(value, str) else list(value)  # type: ignore[call-overload]
    names = [str(n).strip() for n in items if str(n).strip()]
    if not names or any(n not in SERVER_ASSIGNORS for n in names):
        raise config_error(key, value, f"must list some of {', '.join(SERVER_ASSIGNORS)}")
    return tuple(dict.fromkeys(names))


@attrs.frozen(slots=True)
class Endpoint:
    """One listener: `NAME://host:port`; an empty host binds every interface."""

    listener: str
    host: str
    port: int
    security_protocol: str = "PLAINTEXT"

    def __str__(self) -> str:
        return f"{self.listener}://{self.host}:{self.port}"


_LISTENER = re.compile(
    r"^(?P<name>[A-Za-z0-9_.-]+)://(?P<host>\[[^\]]*\]|[^:\[\]]*):(?P<port>\d+)$"
)


def parse_endpoints(key: str, value: object) -> tuple[Endpoint, ...]:
    """`NAME://host:port,...` with the security protocol yet to be resolved."""
    text = str(value)
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


def _http_listener(key: str, value: object) -> tuple[str, int] | None:
    """`http://host:port` (port 0: any free one), or nothing."""
    text = str(value).strip()
    if not text:
        return None
    found = re.fullmatch(r"http://(\[[^\]]*\]|[^:/\[\]]*):(\d+)/?", text)
    if found is None or int(found[2]) > 65535:
        raise config_error(key, value, "must be http://host:port")
    return found[1].strip("[]"), int(found[2])


def _protocol_map(key: str, value: object) -> Mapping[str, str]:
    text = str(value)
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
    return MappingProxyType(out)


endpoints: Final = Parser(ConfigType.STRING, parse_endpoints)
protocol_map: Final = Parser(ConfigType.STRING, _protocol_map)


@attrs.frozen(slots=True, kw_only=True)
class BrokerConfig:
    """A validated broker configuration. Build it with `load` or `from_properties`."""

    # identity and network
    listeners: tuple[Endpoint, ...] = setting(
        "listeners",
        (Endpoint("PLAINTEXT", "", 9092),),
        endpoints,
        "NAME://host:port to listen on, comma-separated (an empty host: every interface)",
    )
    advertised_listeners: tuple[Endpoint, ...] = setting(
        "advertised.listeners",
        (),
        endpoints,
        "NAME://host:port that clients and brokers are told to connect to",
        otherwise="the listeners",
    )
    listener_security_protocol_map: Mapping[str, str] = setting(
        "listener.security.protocol.map",
        MappingProxyType({p: p for p in SECURITY_PROTOCOLS}),
        protocol_map,
        "LISTENER:PROTOCOL pairs, PROTOCOL one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL",
    )
    inter_broker_listener_name: str = setting(
        "inter.broker.listener.name",
        "",
        string,
        "the listener brokers use to talk to each other",
        otherwise="the listener named as security.inter.broker.protocol",
    )
    security_inter_broker_protocol: str = setting(
        "security.inter.broker.protocol",
        "PLAINTEXT",
        string,
        "the inter-broker listener, when inter.broker.listener.name is not set",
    )
    # TLS and SASL: each may be set for one listener as listener.name.<listener>.<key>
    ssl_keystore_type: str = setting(
        "ssl.keystore.type", "PEM", choice("PEM"), "the keystore's format (only PEM)"
    )
    ssl_keystore_location: str | None = setting(
        "ssl.keystore.location",
        None,
        optional_string,
        "a PEM file holding the listener's private key and certificate chain",
    )
    ssl_keystore_certificate_chain: str | None = setting(
        "ssl.keystore.certificate.chain",
        None,
        password,
        "the certificate chain as PEM text (with ssl.keystore.key)",
        sensitive=True,
    )
    ssl_keystore_key: str | None = setting(
        "ssl.keystore.key", None, password, "the private key as PEM text", sensitive=True
    )
    ssl_key_password: str | None = setting(
        "ssl.key.password", None, password, "the private key's password", sensitive=True
    )
    ssl_truststore_type: str = setting(
        "ssl.truststore.type", "PEM", choice("PEM"), "the truststore's format (only PEM)"
    )
    ssl_truststore_location: str | None = setting(
        "ssl.truststore.location", None, optional_string, "a PEM file of trusted certificates"
    )
    ssl_truststore_certificates: str | None = setting(
        "ssl.truststore.certificates",
        None,
        password,
        "trusted certificates as PEM text",
        sensitive=True,
    )
    ssl_client_auth: str = setting(
        "ssl.client.auth",
        "none",
        choice("required", "requested", "none"),
        "whether clients must (required) or may (requested) present a certificate",
    )
    ssl_enabled_protocols: str = setting(
        "ssl.enabled.protocols", "TLSv1.2,TLSv1.3", string, "the TLS versions accepted"
    )
    ssl_cipher_suites: str = setting(
        "ssl.cipher.suites",
        "",
        string,
        "TLS 1.2 cipher suites, OpenSSL names (empty: OpenSSL's defaults)",
    )
    ssl_principal_mapping_rules: str = setting(
        "ssl.principal.mapping.rules",
        "DEFAULT",
        string,
        "RULE:pattern/replacement/[LU],...: a client certificate's DN to a principal name",
    )
    ssl_endpoint_identification_algorithm: str = setting(
        "ssl.endpoint.identification.algorithm",
        "https",
        string,
        "https: a broker checks the other brokers' certificates name their host",
    )
    sasl_enabled_mechanisms: str = setting(
        "sasl.enabled.mechanisms",
        "GSSAPI",
        string,
        "SASL mechanisms a SASL listener offers: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512",
    )
    sasl_mechanism_inter_broker_protocol: str = setting(
        "sasl.mechanism.inter.broker.protocol",
        "GSSAPI",
        string,
        "the SASL mechanism brokers use with each other",
    )
    sasl_server_max_receive_size: int = setting(
        "sasl.server.max.receive.size",
        524288,
        integer(1),
        "the largest frame accepted before authentication completes",
    )
    connections_max_reauth_ms: int = setting(
        "connections.max.reauth.ms",
        0,
        long(0),
        "a SASL session's lifetime: the client re-authenticates within it (KIP-368) or its "
        "connection is closed at its next request (0: sessions never expire); also per "
        "listener and mechanism, listener.name.<l>.<mechanism>.connections.max.reauth.ms",
    )
    connection_failed_authentication_delay_ms: int = setting(
        "connection.failed.authentication.delay.ms",
        100,
        integer(0),
        "a failed authentication is answered (and its connection closed) after this long",
    )
    # passwords set dynamically are stored encrypted (gregor.broker.security.passwords)
    password_encoder_secret: str | None = setting(
        "password.encoder.secret",
        None,
        password,
        "encrypts the passwords of dynamic broker configs in ZooKeeper (unset: such configs "
        "are refused); the same on every broker",
        sensitive=True,
    )
    password_encoder_old_secret: str | None = setting(
        "password.encoder.old.secret",
        None,
        password,
        "the secret before a rotation: a broker starting re-encrypts its stored passwords "
        "with password.encoder.secret",
        sensitive=True,
    )
    password_encoder_keyfactory_algorithm: str | None = setting(
        "password.encoder.keyfactory.algorithm",
        None,
        Parser(
            ConfigType.STRING,
            lambda key, value: choice(*KEY_FACTORY_ALGORITHMS)(key, value) if value else None,
        ),
        f"how the key is derived from the secret: one of {', '.join(KEY_FACTORY_ALGORITHMS)}",
        otherwise="`PBKDF2WithHmacSHA512`",
    )
    password_encoder_cipher_algorithm: str = setting(
        "password.encoder.cipher.algorithm",
        CIPHER_ALGORITHMS[0],
        choice(*CIPHER_ALGORITHMS),
        f"the cipher of stored passwords: {' or '.join(CIPHER_ALGORITHMS)}",
    )
    password_encoder_key_length: int = setting(
        "password.encoder.key.length",
        128,
        integer(8),
        "the cipher's key length in bits: 128, 192 or 256",
    )
    password_encoder_iterations: int = setting(
        "password.encoder.iterations", 4096, integer(1024), "PBKDF2's iteration count"
    )
    authorizer_class_name: str = setting(
        "authorizer.class.name",
        "",
        choice("", *AUTHORIZER_CLASS_NAMES),
        "the ACL authorizer (Kafka's AclAuthorizer, by any of its names); empty: allow all",
    )
    super_users: str = setting(
        "super.users",
        "",
        string,
        "principals the authorizer allows everything, e.g. User:admin;User:broker",
    )
    allow_everyone_if_no_acl_found: bool = setting(
        "allow.everyone.if.no.acl.found",
        False,
        boolean,
        "whether a resource no ACL applies to is open to everyone",
    )
    broker_rack: str | None = setting(
        "broker.rack",
        None,
        optional_string,
        "the rack, for rack-aware replica placement and consumers' closest replica",
    )
    replica_selector_class: str = setting(
        "replica.selector.class",
        "",
        choice("", *REPLICA_SELECTOR_CLASSES),
        "which replica a consumer reads from (KIP-392): empty or LeaderSelector, the "
        "leader; RackAwareReplicaSelector, an in-sync replica in the consumer's client.rack",
    )
    socket_request_max_bytes: int = setting(
        "socket.request.max.bytes",
        104857600,
        integer(1),
        "a larger request closes its connection",
    )
    socket_send_buffer_bytes: int = setting(
        "socket.send.buffer.bytes", 102400, integer(-1), "SO_SNDBUF (-1: the OS default)"
    )
    socket_receive_buffer_bytes: int = setting(
        "socket.receive.buffer.bytes", 102400, integer(-1), "SO_RCVBUF (-1: the OS default)"
    )
    connections_max_idle_ms: int = setting(
        "connections.max.idle.ms", 600000, long(-1), "idle connections close after this long"
    )
    fetch_max_bytes: int = setting(
        "fetch.max.bytes", 57671680, integer(1024), "the most a fetch response returns"
    )
    max_incremental_fetch_session_cache_slots: int = setting(
        "max.incremental.fetch.session.cache.slots",
        1000,
        integer(0),
        "incremental fetch sessions (KIP-227) the broker keeps; 0 declines them",
    )
    # ZooKeeper
    zookeeper_connect: str = setting(
        "zookeeper.connect",
        "",
        string,
        "host:port[,host:port...][/chroot] of the ZooKeeper ensemble",
        otherwise="none: it must be set",
    )
    zookeeper_session_timeout_ms: int = setting(
        "zookeeper.session.timeout.ms", 18000, integer(1), "the ZooKeeper session timeout"
    )
    zookeeper_connection_timeout_ms: int = setting(
        "zookeeper.connection.timeout.ms",
        0,
        integer(1),
        "how long to wait for a ZooKeeper connection",
        otherwise="zookeeper.session.timeout.ms",
    )
    # topics
    num_partitions: int = setting(
        "num.partitions", 1, integer(1), "partitions of an auto-created topic"
    )
    default_replication_factor: int = setting(
        "default.replication.factor",
        1,
        integer(1),
        "replicas of an auto-created topic, or one created without a factor",
    )
    min_insync_replicas: int = setting(
        "min.insync.replicas",
        1,
        integer(1),
        "acks=all produce fails while fewer replicas are in sync (topic default)",
    )
    unclean_leader_election_enable: bool = setting(
        "unclean.leader.election.enable",
        False,
        boolean,
        "an out-of-sync replica may become leader, losing data (topic default)",
    )
    auto_create_topics_enable: bool = setting(
        "auto.create.topics.enable",
        True,
        boolean,
        "Metadata requests for a missing topic create it",
    )
    delete_topic_enable: bool = setting(
        "delete.topic.enable", True, boolean, "DeleteTopics is allowed"
    )
    message_max_bytes: int = setting(
        "message.max.bytes",
        1048588,
        integer(0),
        "the largest record batch a topic accepts (topic default of max.message.bytes)",
    )
    # the group coordinator and __consumer_offsets
    offsets_topic_replication_factor: int = setting(
        "offsets.topic.replication.factor",
        3,
        short(1),
        "replicas of __consumer_offsets (lowered to the live brokers, with a warning)",
    )
    offsets_topic_num_partitions: int = setting(
        "offsets.topic.num.partitions", 50, integer(1), "partitions of __consumer_offsets"
    )
    offsets_topic_segment_bytes: int = setting(
        "offsets.topic.segment.bytes",
        104857600,
        integer(1),
        "segment.bytes of __consumer_offsets",
    )
    offsets_load_buffer_size: int = setting(
        "offsets.load.buffer.size",
        5242880,
        integer(1),
        "bytes read at a time when a coordinator loads its groups",
    )
    offsets_commit_timeout_ms: int = setting(
        "offsets.commit.timeout.ms",
        5000,
        integer(1),
        "an offset commit waits this long for its replicas",
    )
    offsets_retention_minutes: int = setting(
        "offsets.retention.minutes",
        10080,
        integer(1),
        "committed offsets of an empty group expire after this long",
    )
    offsets_retention_check_interval_ms: int = setting(
        "offsets.retention.check.interval.ms",
        600000,
        long(1),
        "how often expired offsets are looked for",
    )
    offset_metadata_max_bytes: int = setting(
        "offset.metadata.max.bytes",
        4096,
        integer(0),
        "the longest metadata string an offset commit may carry",
    )
    group_min_session_timeout_ms: int = setting(
        "group.min.session.timeout.ms", 6000, integer(0), "the shortest session a member may ask"
    )
    group_max_session_timeout_ms: int = setting(
        "group.max.session.timeout.ms",
        1800000,
        integer(0),
        "the longest session a member may ask",
    )
    group_initial_rebalance_delay_ms: int = setting(
        "group.initial.rebalance.delay.ms",
        3000,
        integer(0),
        "a new group's first rebalance waits this long for more members",
    )
    group_max_size: int = setting(
        "group.max.size", INT_MAX, integer(1), "the most members a group may have"
    )
    # KIP-848 consumer groups
    group_consumer_session_timeout_ms: int = setting(
        "group.consumer.session.timeout.ms",
        45000,
        integer(1),
        "a consumer-protocol member that sends no heartbeat this long is removed",
    )
    group_consumer_heartbeat_interval_ms: int = setting(
        "group.consumer.heartbeat.interval.ms",
        5000,
        integer(1),
        "how often a consumer-protocol member is told to heartbeat",
    )
    group_consumer_assignors: tuple[str, ...] = setting(
        "group.consumer.assignors",
        ("uniform", "range"),
        Parser(ConfigType.LIST, _server_assignors),
        "the server-side assignors, the first the default (uniform, range)",
    )
    group_consumer_max_size: int = setting(
        "group.consumer.max.size", INT_MAX, integer(1), "the most members a consumer group may have"
    )
    # __transaction_state and the transaction coordinator
    transaction_state_log_num_partitions: int = setting(
        "transaction.state.log.num.partitions",
        50,
        integer(1),
        "partitions of __transaction_state",
    )
    transaction_state_log_replication_factor: int = setting(
        "transaction.state.log.replication.factor",
        3,
        short(1),
        "replicas of __transaction_state",
    )
    transaction_state_log_min_isr: int = setting(
        "transaction.state.log.min.isr",
        2,
        integer(1),
        "min.insync.replicas of __transaction_state",
    )
    transaction_state_log_segment_bytes: int = setting(
        "transaction.state.log.segment.bytes",
        104857600,
        integer(1),
        "segment.bytes of __transaction_state",
    )
    transaction_state_log_load_buffer_size: int = setting(
        "transaction.state.log.load.buffer.size",
        5242880,
        integer(1),
        "bytes read at a time when a coordinator loads a __transaction_state partition",
    )
    transactional_id_expiration_ms: int = setting(
        "transactional.id.expiration.ms",
        604800000,
        integer(1),
        "a transactional id idle this long (no transaction) is forgotten",
    )
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int = setting(
        "transaction.abort.timed.out.transaction.cleanup.interval.ms",
        10000,
        integer(1),
        "how often transactions past their timeout are looked for and aborted",
    )
    transaction_remove_expired_transaction_cleanup_interval_ms: int = setting(
        "transaction.remove.expired.transaction.cleanup.interval.ms",
        3600000,
        integer(1),
        "how often expired transactional ids are looked for and removed",
    )
    # replication
    replica_lag_time_max_ms: int = setting(
        "replica.lag.time.max.ms",
        30000,
        long(0),
        "a follower not caught up for this long leaves the ISR",
    )
    replica_fetch_wait_max_ms: int = setting(
        "replica.fetch.wait.max.ms", 500, integer(0), "a follower's fetch waits at most this long"
    )
    replica_fetch_max_bytes: int = setting(
        "replica.fetch.max.bytes", 1048576, integer(0), "bytes a follower fetches per partition"
    )
    replica_fetch_min_bytes: int = setting(
        "replica.fetch.min.bytes", 1, integer(1), "bytes a follower's fetch waits for"
    )
    replica_fetch_response_max_bytes: int = setting(
        "replica.fetch.response.max.bytes",
        10485760,
        integer(0),
        "bytes a follower fetches per request",
    )
    replica_fetch_backoff_ms: int = setting(
        "replica.fetch.backoff.ms", 1000, integer(0), "a follower waits this long after an error"
    )
    replica_socket_timeout_ms: int = setting(
        "replica.socket.timeout.ms", 30000, integer(1), "a follower's request timeout"
    )
    num_replica_fetchers: int = setting(
        "num.replica.fetchers", 1, integer(1), "fetcher tasks per source broker"
    )
    # leadership
    controlled_shutdown_enable: bool = setting(
        "controlled.shutdown.enable",
        True,
        boolean,
        "a stopping broker first moves its leaderships away",
    )
    controlled_shutdown_max_retries: int = setting(
        "controlled.shutdown.max.retries",
        3,
        integer(0),
        "controlled shutdown attempts before stopping anyway",
    )
    controlled_shutdown_retry_backoff_ms: int = setting(
        "controlled.shutdown.retry.backoff.ms",
        5000,
        long(0),
        "the wait between controlled shutdown attempts",
    )
    auto_leader_rebalance_enable: bool = setting(
        "auto.leader.rebalance.enable",
        True,
        boolean,
        "the controller moves leaderships back to preferred replicas",
    )
    leader_imbalance_check_interval_seconds: int = setting(
        "leader.imbalance.check.interval.seconds",
        300,
        long(1),
        "how often the controller checks the leader balance",
    )
    leader_imbalance_per_broker_percentage: int = setting(
        "leader.imbalance.per.broker.percentage",
        10,
        integer(0, 100),
        "a broker with more of its preferred leaderships elsewhere is rebalanced",
    )
    controller_socket_timeout_ms: int = setting(
        "controller.socket.timeout.ms",
        30000,
        integer(1),
        "the controller's request timeout to brokers",
    )
    # replication throttles (gregor.broker.replication_quotas), dynamic per broker
    leader_replication_throttled_rate: int = setting(
        "leader.replication.throttled.rate",
        LONG_MAX,
        long(1),
        "bytes/s a leader sends in all to the out-of-sync followers of its throttled replicas",
    )
    follower_replication_throttled_rate: int = setting(
        "follower.replication.throttled.rate",
        LONG_MAX,
        long(1),
        "bytes/s a follower fetches in all for its throttled replicas out of the ISR",
    )
    # client quotas (gregor.broker.quotas)
    quota_window_num: int = setting(
        "quota.window.num",
        11,
        integer(1),
        "quota windows: a client may take num x size seconds of its quota at once",
    )
    quota_window_size_seconds: int = setting(
        "quota.window.size.seconds", 1, integer(1), "the time span of one quota window"
    )
    metrics_prometheus_listener: tuple[str, int] | None = setting(
        "metrics.prometheus.listener",
        None,
        Parser(ConfigType.STRING, _http_listener),
        "http://host:port where Prometheus metrics are served (unset: not served); Gregor's own",
    )
    log_format: str = setting(
        "log.format", "text", choice("text", "json"), "text lines, or one JSON object per line"
    )
    metrics_log_interval_ms: int = setting(
        "gregor.metrics.log.interval.ms",
        60000,
        long(0),
        "how often the in-process metrics are logged (0: never); Gregor's own",
    )
    # gregor-storage's view of the same properties
    log_config: LogConfig = attrs.field(factory=LogConfig)
    log_manager_config: LogManagerConfig = attrs.field(factory=LogManagerConfig)
    # each listener's TLS and SASL, and how this broker connects to the others
    listener_security: Mapping[str, ListenerSecurity] = attrs.field(factory=dict, eq=False)
    inter_broker_security: ClientSecurity = attrs.field(factory=ClientSecurity, eq=False)
    # every property as given (file, then overrides), for DescribeConfigs and storage
    properties: Mapping[str, str] = attrs.field(factory=dict, eq=False)

    @property
    def broker_id(self) -> int:
        """`broker.id`, which gregor-storage declares (it writes it to meta.properties)."""
        return self.log_manager_config.broker_id

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
        values: dict[str, Any] = {name: a.default for name, a in _FIELDS.items()}
        for key, text in given.items():
            found = _BROKER.get(key)
            if found is not None:
                name, declaration = found
                values[name] = declaration.parser(key, text)
            elif key not in SERVER_SETTINGS and not key.startswith(("log.", LISTENER_PREFIX)):
                log.warning("The configuration %r was supplied but isn't a known config.", key)
        values["log_manager_config"] = LogManagerConfig.from_server_properties(given)
        _resolve_listeners(values, given)
        _resolve_security(values, given)
        _check_relations(values)
        values["log_config"] = LogConfig.from_server_properties(given)
        if not values["zookeeper_connection_timeout_ms"]:
            values["zookeeper_connection_timeout_ms"] = values["zookeeper_session_timeout_ms"]
        return cls(properties=given, **values)

    def with_overrides(self, changes: Mapping[str, str]) -> BrokerConfig:
        """This configuration with some properties changed (validated again as a whole)."""
        return self.from_properties({**self.properties, **changes})

    def endpoint(self, listener: str) -> Endpoint | None:
        """The advertised endpoint of a listener."""
        return next((e for e in self.advertised_listeners if e.listener == listener), None)

    @property
    def password_encoder(self) -> PasswordEncoder | None:
        """What encrypts the passwords of dynamic configs (None: no secret, they are
        refused)."""
        return self._encoder(self.password_encoder_secret)

    @property
    def password_decoders(self) -> tuple[PasswordEncoder, ...]:
        """What may decrypt a stored password: the secret, then the old secret."""
        found = (
            self._encoder(self.password_encoder_secret),
            self._encoder(self.password_encoder_old_secret),
        )
        return tuple(e for e in found if e is not None)

    def _encoder(self, secret: str | None) -> PasswordEncoder | None:
        if secret is None:
            return None
        return PasswordEncoder(
            secret,
            self.password_encoder_keyfactory_algorithm or next(iter(KEY_FACTORY_ALGORITHMS)),
            self.password_encoder_cipher_algorithm,
            self.password_encoder_key_length,
            self.password_encoder_iterations,
        )

    def describe(self) -> list[tuple[str, str | None, bool]]:
        """(name, value as text, is it the default) for every setting this broker and its
        log manager declare."""
        out: list[tuple[str, str | None, bool]] = []
        for key, declaration in DESCRIBED.items():
            if key in self.properties:
                out.append((key, self.properties[key], False))
            else:
                out.append((key, declaration.default, True))
        return out


_BROKER: Final = declared(BrokerConfig)
_FIELDS: Final = {a.name: a for a in attrs.fields(BrokerConfig) if "kafka" in a.metadata}


# Kafka settings accepted and deliberately without effect here (threads, buffers, JMX, ...).
IGNORED_SETTINGS: Final = {
    s.key: s
    for s in (
        accepted(
            "num.network.threads", ConfigType.INT, "no effect: one event loop serves every socket"
        ),
        accepted(
            "num.io.threads", ConfigType.INT, "no effect: requests are handled on the event loop"
        ),
        accepted(
            "queued.max.requests", ConfigType.INT, "no effect: each connection reads four ahead"
        ),
        accepted(
            "zookeeper.max.in.flight.requests", ConfigType.INT, "no effect: kazoo pipelines alone"
        ),
        accepted("zookeeper.set.acl", ConfigType.BOOLEAN, "no effect: no ZooKeeper ACLs yet"),
        accepted(
            "inter.broker.protocol.version", ConfigType.STRING, "no effect: versions are negotiated"
        ),
        accepted(
            "log.message.format.version", ConfigType.STRING, "no effect: always record batch v2"
        ),
    )
}

# What DescribeConfigs lists for a broker (the broker-wide topic defaults are added there).
DESCRIBED: Final[dict[str, Setting]] = {
    **{key: declaration for key, (_, declaration) in _BROKER.items()},
    **{key: s for key, s in MANAGER_SETTINGS.items() if key not in _BROKER},
}
# Broker settings that can change at run time: the broker-wide defaults of topic settings,
# and the replication throttles.
REPLICATION_THROTTLES: Final = frozenset(
    {"leader.replication.throttled.rate", "follower.replication.throttled.rate"}
)
DYNAMIC_BROKER_CONFIGS: Final = frozenset(SYNONYM_SETTINGS) | REPLICATION_THROTTLES
# KIP-226: a listener's keystore, truststore and SASL users can change at run time, per
# broker, as `listener.name.<l>.<setting>` (Kafka's SslConfigs.RECONFIGURABLE_CONFIGS that
# PEM uses, and the listener's SASL settings); new connections get them, open ones keep theirs.
RECONFIGURABLE_LISTENER_SETTINGS: Final = frozenset(
    {
        "ssl.keystore.type",
        "ssl.keystore.location",
        "ssl.keystore.certificate.chain",
        "ssl.keystore.key",
        "ssl.key.password",
        "ssl.truststore.type",
        "ssl.truststore.location",
        "ssl.truststore.certificates",
        "sasl.enabled.mechanisms",
    }
)


def is_dynamic_listener_setting(key: str) -> bool:
    """`listener.name.<l>.<reconfigurable setting>` or a mechanism's
    `listener.name.<l>.<mechanism>.sasl.jaas.config`."""
    if not key.startswith(LISTENER_PREFIX):
        return False
    _, _, setting = key[len(LISTENER_PREFIX) :].partition(".")
    if setting in RECONFIGURABLE_LISTENER_SETTINGS:
        return True
    mechanism, _, rest = setting.partition(".")
    return rest == "sasl.jaas.config" and mechanism.upper() in SASL_MECHANISMS


# A SASL mechanism's JAAS config, only ever per listener and mechanism (Kafka's password).
SASL_JAAS_CONFIG: Final = Setting(
    "sasl.jaas.config",
    password,
    "a SASL mechanism's login module and options: listener.name.<l>.<mechanism>.sasl.jaas.config",
    None,
    "none",
    sensitive=True,
)


def listener_base(key: str) -> str | None:
    """The setting a listener's key overrides (Kafka's synonym of it): `ssl.key.password`
    for `listener.name.<l>.ssl.key.password`, `sasl.jaas.config` for
    `listener.name.<l>.<mechanism>.sasl.jaas.config`; None for a key of no listener."""
    if not key.startswith(LISTENER_PREFIX):
        return None
    _, _, setting = key[len(LISTENER_PREFIX) :].partition(".")
    mechanism, _, rest = setting.partition(".")
    if rest and mechanism.upper() in SASL_MECHANISMS:
        return rest
    return setting or None


def broker_setting(key: str) -> Setting | None:
    """The declaration of a broker key, listener keys by the setting they override."""
    base = listener_base(key)
    if base == SASL_JAAS_CONFIG.key:
        return SASL_JAAS_CONFIG
    return SERVER_SETTINGS.get(base or key)


def is_password_config(key: str) -> bool:
    """Whether a dynamic config is stored encrypted (gregor.broker.security.passwords)."""
    declaration = broker_setting(key)
    return declaration is not None and declaration.sensitive


# Every server setting a broker reads, and those it accepts without effect.
SERVER_SETTINGS: Final[dict[str, Setting]] = {
    **DESCRIBED,
    **{key: s for key, s in SYNONYM_SETTINGS.items() if key not in DESCRIBED},
    **IGNORED_SETTINGS,
}


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
            out.append(attrs.evolve(e, security_protocol=protocol))
        return tuple(out)

    listeners = resolve("listeners", values["listeners"])
    if not listeners:
        raise config_error("listeners", given.get("listeners", ""), "must name at least one")
    ports = [e.port for e in listeners if e.port]
    if len(set(ports)) != len(ports):
        raise config_error("listeners", given.get("listeners", ""), "each needs its own port")
    advertised = values["advertised_listeners"]
    advertised = listeners if not advertised else resolve("advertised.listeners", advertised)
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
    if not inter:
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


def _resolve_security(values: dict[str, Any], given: Mapping[str, str]) -> None:
    """Each TLS or SASL listener's security, and the inter-broker connections'."""
    security: dict[str, ListenerSecurity] = {}
    for endpoint in values["listeners"]:
        if endpoint.security_protocol == "PLAINTEXT":
            continue
        lookup, jaas = _listener_settings(values, given, endpoint.listener)
        security[endpoint.listener] = listener_security(
            endpoint.listener, endpoint.security_protocol, lookup, jaas
        )
        if endpoint.listener == values["inter_broker_listener_name"]:
            mechanism = values["sasl_mechanism_inter_broker_protocol"].upper()
            values["inter_broker_security"] = inter_broker_security(
                security[endpoint.listener], lookup, mechanism
            )
    values["listener_security"] = MappingProxyType(security)


def _listener_settings(
    values: dict[str, Any], given: Mapping[str, str], listener: str
) -> tuple[Callable[[str], Any], Callable[[str, str], Any]]:
    """A listener's value of a setting (its `listener.name.<l>.` override, else the
    broker's), and a SASL mechanism's (`listener.name.<l>.<mechanism>.<key>`, else the
    listener's; the JAAS config is only ever per mechanism)."""
    prefix = f"{LISTENER_PREFIX}{listener.lower()}."
    overrides = {k[len(prefix) :]: v for k, v in given.items() if k.lower().startswith(prefix)}

    def lookup(key: str) -> Any:
        if key in overrides:
            return _BROKER[key][1].parser(prefix + key, overrides[key])
        return values[_BROKER[key][0]]

    def for_mechanism(mechanism: str, key: str) -> Any:
        own = f"{mechanism.lower()}.{key}"
        if key not in _BROKER:
            return overrides.get(own)
        if own in overrides:
            return _BROKER[key][1].parser(prefix + own, overrides[own])
        return lookup(key)

    return lookup, for_mechanism


def _check_relations(values: dict[str, Any]) -> None:
    broker_id = values["log_manager_config"].broker_id
    if broker_id < 0:
        raise config_error(
            "broker.id",
            broker_id,
            "must be set to a value of at least 0 (automatic broker ids are not supported)",
        )
    if not values["zookeeper_connect"]:
        raise config_error("zookeeper.connect", values["zookeeper_connect"], "must be set")
    if values["password_encoder_key_length"] not in AES_KEY_LENGTHS:
        raise config_error(
            "password.encoder.key.length",
            values["password_encoder_key_length"],
            f"AES takes keys of {', '.join(map(str, AES_KEY_LENGTHS))} bits",
        )
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
