"""Client configuration: Kafka's property names, validated, with the Java client's defaults.

A config is a plain dict, as with confluent-kafka and the Java client:

    ProducerConfig.from_dict({"bootstrap.servers": "127.0.0.1:9092", "acks": "all"})

Every value may be given as the Java client's string form ("5", "true", "a,b") or as a
Python value. An unknown key is an error that suggests the closest valid name; a bad value is
an error that names the key, the value and the rule it breaks.

Each setting is an attrs field whose metadata is a `Setting` (its Kafka name and how to read
it), so the result is a frozen, typed object (`config.linger_ms`), and the tables below are the
one place where names, defaults and rules live.
"""

from __future__ import annotations

import difflib
import itertools
import ssl
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, Self, TypeVar

import attrs

from gregor.client.security import (
    SASL_MECHANISMS,
    ClientSecurity,
    SaslCredentials,
    client_ssl_context,
    parse_jaas,
)
from gregor.protocol import compression
from gregor.protocol.errors import UnsupportedCompressionTypeError

T = TypeVar("T")

_client_ids = itertools.count(1)


class ConfigError(ValueError):
    """A configuration that cannot be used: an unknown key or a value that breaks a rule."""


# -- value readers -------------------------------------------------------------------------
# A reader turns what the user gave into the typed value, or raises ValueError with the rule.

Reader = Callable[[Any], Any]

_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}


def read_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
        return value.strip().lower() in _TRUE
    raise ValueError("must be true or false")


def read_int(lo: int | None = None, hi: int | None = None) -> Reader:
    def read(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int | str):
            raise ValueError("must be an integer")
        try:
            number = int(value)
        except ValueError:
            raise ValueError("must be an integer") from None
        if lo is not None and number < lo:
            raise ValueError(f"must be at least {lo}")
        if hi is not None and number > hi:
            raise ValueError(f"must be at most {hi}")
        return number

    return read


def read_str(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError("must be a string")
    return value


def read_optional_str(value: Any) -> str | None:
    """A string that may be absent (None); empty is not a valid value."""
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise ValueError("must be a non-empty string or None")
    return value


def read_list(value: Any) -> tuple[str, ...]:
    """A comma-separated string or a sequence of strings."""
    if isinstance(value, str):
        items: Sequence[Any] = value.split(",")
    elif isinstance(value, Sequence):
        items = value
    else:
        raise ValueError("must be a comma-separated string or a list of strings")
    out = []
    for item in items:
        if not isinstance(item, str):
            raise ValueError("must be a comma-separated string or a list of strings")
        if item.strip():
            out.append(item.strip())
    return tuple(out)


def read_choice(*choices: str) -> Reader:
    def read(value: Any) -> str:
        if isinstance(value, str) and value.strip().lower() in choices:
            return value.strip().lower()
        raise ValueError(f"must be one of {', '.join(choices)}")

    return read


def read_compression_type(value: Any) -> str:
    """A codec name whose library is installed (the codecs but gzip are optional extras)."""
    name: str = read_choice(*(codec.name.lower() for codec in compression.Compression))(value)
    try:
        compression.require(compression.Compression[name.upper()])
    except UnsupportedCompressionTypeError as exc:
        raise ValueError(str(exc)) from None
    return name


def read_acks(value: Any) -> int:
    text = str(value).strip().lower()
    if text in ("all", "-1"):
        return -1
    if text in ("0", "1"):
        return int(text)
    raise ValueError("must be all, -1, 0 or 1")


def read_pluggable(*names: str) -> Reader:
    """A built-in chosen by name, or any Python object that implements the interface."""

    def read(value: Any) -> Any:
        if isinstance(value, str):
            if value.strip().lower() in names:
                return value.strip().lower()
            raise ValueError(f"must be one of {', '.join(names)}, or an object")
        if value is None:
            raise ValueError(f"must be one of {', '.join(names)}, or an object")
        return value

    return read


def read_pluggable_list(*names: str) -> Reader:
    """A list of built-ins by name (Java class names are accepted too) or objects."""
    known = read_pluggable(*names)

    def read(value: Any) -> tuple[Any, ...]:
        items = (
            read_list(value)
            if isinstance(value, str)
            else tuple(value)
            if isinstance(value, list | tuple)
            else (value,)
        )
        out = []
        for item in items:
            if isinstance(item, str):
                item = _JAVA_ASSIGNORS.get(item.strip(), item)
            out.append(known(item))
        if not out:
            raise ValueError("must name at least one")
        return tuple(out)

    return read


_JAVA_ASSIGNORS = {
    "org.apache.kafka.clients.consumer.RangeAssignor": "range",
    "org.apache.kafka.clients.consumer.RoundRobinAssignor": "roundrobin",
    "org.apache.kafka.clients.consumer.StickyAssignor": "sticky",
    "org.apache.kafka.clients.consumer.CooperativeStickyAssignor": "cooperative-sticky",
}


def read_any(value: Any) -> Any:
    return value


SECURITY_PROTOCOLS = ("plaintext", "ssl", "sasl_plaintext", "sasl_ssl")
MECHANISMS = ", ".join(SASL_MECHANISMS)


def read_sasl_mechanism(value: Any) -> str:
    if isinstance(value, str) and value.strip().upper() in (*SASL_MECHANISMS, "GSSAPI"):
        return value.strip().upper()
    raise ValueError(f"must be one of {MECHANISMS}")


# The Java client's names (and librdkafka's older ones) for the same settings.
ALIASES = {
    "ssl.truststore.location": "ssl.ca.location",
    "ssl.keystore.location": "ssl.certificate.location",
    "sasl.mechanisms": "sasl.mechanism",
}


@attrs.frozen
class Setting:
    """What the table knows of one property: its Kafka name and how to read a value."""

    name: str
    read: Reader
    doc: str = ""


def setting(name: str, default: T, read: Reader, doc: str = "") -> T:
    """An attrs field for the property `name` (typed as its default for the checker)."""
    field: T = attrs.field(default=default, metadata={"kafka": Setting(name, read, doc)})
    return field


# -- the tables ----------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class ClientConfig:
    """What every client shares: where the cluster is and how to talk to it."""

    KIND: ClassVar[str] = "client"

    bootstrap_servers: tuple[str, ...] = setting(
        "bootstrap.servers", (), read_list, "host:port pairs for the first connection"
    )
    client_id: str = setting("client.id", "", read_str, "sent with every request")
    request_timeout_ms: int = setting(
        "request.timeout.ms",
        30_000,
        read_int(0),
        "a request without a response after this long fails (and is retried if it may be)",
    )
    retry_backoff_ms: int = setting(
        "retry.backoff.ms", 100, read_int(0), "the first wait before a retry"
    )
    retry_backoff_max_ms: int = setting(
        "retry.backoff.max.ms",
        1000,
        read_int(0),
        "the longest wait before a retry (the backoff grows exponentially)",
    )
    reconnect_backoff_ms: int = setting(
        "reconnect.backoff.ms", 50, read_int(0), "the first wait before reconnecting to a broker"
    )
    reconnect_backoff_max_ms: int = setting(
        "reconnect.backoff.max.ms",
        1000,
        read_int(0),
        "the longest wait before reconnecting to a broker",
    )
    socket_connection_setup_timeout_ms: int = setting(
        "socket.connection.setup.timeout.ms",
        10_000,
        read_int(0),
        "a connection not established after this long is abandoned",
    )
    socket_connection_setup_timeout_max_ms: int = setting(
        "socket.connection.setup.timeout.max.ms",
        30_000,
        read_int(0),
        "the longest connection setup timeout, after backoff",
    )
    connections_max_idle_ms: int = setting(
        "connections.max.idle.ms",
        540_000,
        read_int(-1),
        "idle connections close after this long (-1: never)",
    )
    metadata_max_age_ms: int = setting(
        "metadata.max.age.ms", 300_000, read_int(0), "metadata is refreshed at least this often"
    )
    send_buffer_bytes: int = setting(
        "send.buffer.bytes", 131_072, read_int(-1), "SO_SNDBUF (-1: the OS default)"
    )
    receive_buffer_bytes: int = setting(
        "receive.buffer.bytes", 65_536, read_int(-1), "SO_RCVBUF (-1: the OS default)"
    )
    security_protocol: str = setting(
        "security.protocol",
        "plaintext",
        read_choice(*SECURITY_PROTOCOLS),
        "plaintext, ssl, sasl_plaintext or sasl_ssl",
    )
    ssl_context: Any = setting(  # noqa: RUF009
        "ssl.context", None, read_any, "a ready ssl.SSLContext (instead of the ssl.* files)"
    )
    ssl_ca_location: str | None = setting(
        "ssl.ca.location", None, read_optional_str, "PEM file of the CAs that sign the brokers"
    )
    ssl_certificate_location: str | None = setting(
        "ssl.certificate.location",
        None,
        read_optional_str,
        "PEM file of this client's certificate (and key) for mutual TLS",
    )
    ssl_key_location: str | None = setting(
        "ssl.key.location", None, read_optional_str, "PEM file of the certificate's private key"
    )
    ssl_key_password: str | None = setting(
        "ssl.key.password", None, read_optional_str, "the private key's password"
    )
    ssl_endpoint_identification_algorithm: str = setting(
        "ssl.endpoint.identification.algorithm",
        "https",
        read_choice("https", "none"),
        "https: the broker's certificate must name the host connected to; none: not checked",
    )
    sasl_mechanism: str = setting(
        "sasl.mechanism",
        "GSSAPI",
        read_sasl_mechanism,
        "PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (GSSAPI, the default, is not supported)",
    )
    sasl_username: str | None = setting(
        "sasl.username", None, read_optional_str, "the SASL user (PLAIN and SCRAM)"
    )
    sasl_password: str | None = setting(
        "sasl.password", None, read_optional_str, "the SASL password (PLAIN and SCRAM)"
    )
    sasl_jaas_config: str | None = setting(
        "sasl.jaas.config",
        None,
        read_optional_str,
        "the Java client's way to give sasl.username and sasl.password (a LoginModule entry)",
    )
    client_dns_lookup: str = setting(
        "client.dns.lookup",
        "use_all_dns_ips",
        read_choice("use_all_dns_ips", "resolve_canonical_bootstrap_servers_only"),
        "whether bootstrap names are resolved to every address or canonicalized",
    )

    @classmethod
    def settings(cls) -> dict[str, attrs.Attribute[Any]]:
        """The fields of this config by Kafka name."""
        return {a.metadata["kafka"].name: a for a in attrs.fields(cls) if "kafka" in a.metadata}

    @classmethod
    def knows(cls, key: str) -> bool:
        """Whether `key` (or its Java name) is a setting of this kind of client."""
        return ALIASES.get(key, key) in cls.settings()

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> Self:
        """Read and validate a config dict; raise ConfigError naming what is wrong."""
        if not isinstance(values, Mapping):
            raise ConfigError(f"a {cls.KIND} config must be a dict, not {type(values).__name__}")
        known = cls.settings()
        kwargs: dict[str, Any] = {}
        for key, value in values.items():
            attribute = known.get(ALIASES.get(key, key))
            if attribute is None:
                raise ConfigError(_unknown_key(cls.KIND, key, known))
            item: Setting = attribute.metadata["kafka"]
            try:
                kwargs[attribute.name] = item.read(value)
            except ValueError as exc:
                raise ConfigError(f"{key}={value!r}: {exc}") from None
        config = cls(**kwargs)
        return config._checked(set(values))

    def _checked(self, given: set[str]) -> Self:
        """Rules across settings, and defaults that depend on others (Java's post-processing)."""
        if not self.bootstrap_servers:
            raise ConfigError("bootstrap.servers must name at least one host:port")
        for server in self.bootstrap_servers:
            parse_host_port(server)
        self.security()  # the files must load and SASL must have its credentials
        return self

    def security(self) -> ClientSecurity:
        """TLS and SASL as security.protocol asks (ConfigError naming what is missing)."""
        protocol = self.security_protocol
        context: ssl.SSLContext | None = None
        if protocol in ("ssl", "sasl_ssl"):
            context = self.ssl_context
            if context is None:
                try:
                    context = client_ssl_context(
                        self.ssl_ca_location,
                        self.ssl_certificate_location,
                        self.ssl_key_location,
                        self.ssl_key_password,
                        check_hostname=self.ssl_endpoint_identification_algorithm == "https",
                    )
                except (OSError, ssl.SSLError) as exc:
                    raise ConfigError(f"cannot load the ssl.*.location files: {exc}") from None
        sasl = None
        if protocol.startswith("sasl_"):
            username, password = self.sasl_username, self.sasl_password
            if self.sasl_jaas_config is not None and username is None:
                try:
                    options = parse_jaas(self.sasl_jaas_config).options
                except ValueError as exc:
                    raise ConfigError(f"sasl.jaas.config: {exc}") from None
                username, password = options.get("username"), options.get("password")
            if self.sasl_mechanism == "GSSAPI":
                raise ConfigError(f"security.protocol={protocol} needs sasl.mechanism {MECHANISMS}")
            if username is None or password is None:
                raise ConfigError(
                    f"security.protocol={protocol} needs sasl.username and sasl.password"
                )
            sasl = SaslCredentials(self.sasl_mechanism, username, password)
        return ClientSecurity(context, sasl)

    def get(self, name: str) -> Any:
        """The value of a property by its Kafka name."""
        attribute = self.settings().get(ALIASES.get(name, name))
        if attribute is None:
            raise ConfigError(_unknown_key(self.KIND, name, self.settings()))
        return getattr(self, attribute.name)


def _unknown_key(kind: str, key: str, known: Mapping[str, Any]) -> str:
    close = difflib.get_close_matches(key, list(known), n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return f"unknown {kind} config {key!r}{hint}"


def parse_host_port(server: str) -> tuple[str, int]:
    """'host:port' (or '[v6]:port'), as in bootstrap.servers."""
    text = server.strip()
    for prefix in ("PLAINTEXT://", "SSL://", "SASL_PLAINTEXT://", "SASL_SSL://"):
        if text.upper().startswith(prefix):
            text = text[len(prefix) :]
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"bootstrap.servers entry {server!r} is not host:port")
    return host.strip("[]"), int(port)


SERIALIZERS = ("bytes", "str", "json")
PARTITIONERS = ("murmur2_random", "murmur2", "consistent_random", "consistent", "random")


@attrs.frozen(kw_only=True)
class ProducerConfig(ClientConfig):
    KIND: ClassVar[str] = "producer"

    receive_buffer_bytes: int = setting(
        "receive.buffer.bytes", 32_768, read_int(-1), "SO_RCVBUF (-1: the OS default)"
    )
    acks: int = setting("acks", -1, read_acks, "all (-1), 1 or 0")
    linger_ms: int = setting(
        "linger.ms", 0, read_int(0), "wait up to this long for a batch to fill before sending"
    )
    batch_size: int = setting(
        "batch.size", 16_384, read_int(0), "the size of one partition's batch, in bytes"
    )
    buffer_memory: int = setting(
        "buffer.memory",
        33_554_432,
        read_int(0),
        "bytes of records buffered before produce() blocks",
    )
    compression_type: str = setting(
        "compression.type",
        "none",
        read_compression_type,
        "none, gzip, snappy, lz4 or zstd (the last three need gregor-client's extra of that name)",
    )
    max_in_flight_requests_per_connection: int = setting(
        "max.in.flight.requests.per.connection",
        5,
        read_int(1),
        "unanswered produce requests per broker",
    )
    retries: int = setting(
        "retries",
        2_147_483_647,
        read_int(0),
        "how often a failed request is retried (within its timeout)",
    )
    delivery_timeout_ms: int = setting(
        "delivery.timeout.ms",
        120_000,
        read_int(0),
        "a record not acknowledged after this long fails",
    )
    max_block_ms: int = setting(
        "max.block.ms", 60_000, read_int(0), "the longest produce() and metadata waits block"
    )
    max_request_size: int = setting(
        "max.request.size",
        1_048_576,
        read_int(0),
        "the largest produce request (and record) the producer sends",
    )
    metadata_max_idle_ms: int = setting(
        "metadata.max.idle.ms",
        300_000,
        read_int(5000),
        "a topic not produced to for this long leaves the metadata",
    )
    partitioner: Any = setting(  # noqa: RUF009
        "partitioner",
        "murmur2_random",
        read_pluggable(*PARTITIONERS),
        "murmur2_random (Java's), murmur2, consistent_random, consistent, random, or a callable",
    )
    partitioner_ignore_keys: bool = setting(
        "partitioner.ignore.keys",
        False,
        read_bool,
        "partition keyed records as unkeyed ones (sticky)",
    )
    partitioner_adaptive_partitioning_enable: bool = setting(
        "partitioner.adaptive.partitioning.enable",
        True,
        read_bool,
        "sticky partitions favour faster brokers",
    )
    enable_idempotence: bool = setting(
        "enable.idempotence",
        True,
        read_bool,
        "exactly-once per partition: producer id and sequence numbers",
    )
    transactional_id: str | None = setting(
        "transactional.id",
        None,
        read_optional_str,
        "makes the producer transactional (stable across restarts)",
    )
    transaction_timeout_ms: int = setting(
        "transaction.timeout.ms",
        60_000,
        read_int(1),
        "the coordinator aborts a transaction open for longer",
    )
    key_serializer: Any = setting(  # noqa: RUF009
        "key.serializer", "bytes", read_pluggable(*SERIALIZERS), "bytes, str, json, or a callable"
    )
    value_serializer: Any = setting(  # noqa: RUF009
        "value.serializer", "bytes", read_pluggable(*SERIALIZERS), "bytes, str, json, or a callable"
    )
    # Set when the user asked for idempotence explicitly: then the broker must support it.
    idempotence_required: bool = attrs.field(default=False)

    def _checked(self, given: set[str]) -> Self:
        config = super()._checked(given)
        changes: dict[str, Any] = {}
        if "client.id" not in given:
            suffix = self.transactional_id or next(_client_ids)
            changes["client_id"] = f"producer-{suffix}"
        if self.transactional_id is not None and not self.enable_idempotence:
            raise ConfigError("transactional.id needs enable.idempotence=true")
        # As the Java client: idempotence is on by default but yields silently to settings
        # that exclude it, unless the user asked for it (or for transactions).
        conflicts = []
        if self.acks != -1:
            conflicts.append("acks must be all")
        if self.max_in_flight_requests_per_connection > 5:
            conflicts.append("max.in.flight.requests.per.connection must be at most 5")
        if self.retries == 0:
            conflicts.append("retries must be greater than 0")
        explicit = "enable.idempotence" in given or self.transactional_id is not None
        if self.enable_idempotence and conflicts:
            if explicit:
                raise ConfigError(f"enable.idempotence=true: {'; '.join(conflicts)}")
            changes["enable_idempotence"] = False
        changes["idempotence_required"] = explicit and self.enable_idempotence
        if self.delivery_timeout_ms < self.linger_ms + self.request_timeout_ms:
            if "delivery.timeout.ms" in given:
                raise ConfigError(
                    f"delivery.timeout.ms={self.delivery_timeout_ms} must be at least "
                    f"linger.ms + request.timeout.ms ({self.linger_ms + self.request_timeout_ms})"
                )
            changes["delivery_timeout_ms"] = self.linger_ms + self.request_timeout_ms
        return attrs.evolve(config, **changes) if changes else config


ASSIGNORS = ("range", "roundrobin", "sticky", "cooperative-sticky")


@attrs.frozen(kw_only=True)
class ConsumerConfig(ClientConfig):
    KIND: ClassVar[str] = "consumer"

    group_id: str | None = setting(
        "group.id",
        None,
        read_optional_str,
        "the consumer group (needed for subscribe() and commits)",
    )
    group_instance_id: str | None = setting(
        "group.instance.id",
        None,
        read_optional_str,
        "a static member id: restarts within the session do not rebalance",
    )
    group_protocol: str = setting(
        "group.protocol",
        "classic",
        read_choice("classic", "consumer"),
        "classic (JoinGroup/SyncGroup) or consumer (KIP-848: the coordinator assigns)",
    )
    group_remote_assignor: str | None = setting(
        "group.remote.assignor",
        None,
        read_optional_str,
        "group.protocol=consumer: the server-side assignor to ask for (uniform, range)",
    )
    auto_offset_reset: str = setting(
        "auto.offset.reset",
        "latest",
        read_choice("earliest", "latest", "none"),
        "where to start without a committed offset: earliest, latest or none (error)",
    )
    enable_auto_commit: bool = setting(
        "enable.auto.commit", True, read_bool, "commit consumed positions in the background"
    )
    auto_commit_interval_ms: int = setting(
        "auto.commit.interval.ms", 5000, read_int(0), "how often positions are auto-committed"
    )
    session_timeout_ms: int = setting(
        "session.timeout.ms",
        45_000,
        read_int(1),
        "a member without heartbeats for this long leaves the group",
    )
    heartbeat_interval_ms: int = setting(
        "heartbeat.interval.ms", 3000, read_int(1), "how often heartbeats are sent"
    )
    max_poll_interval_ms: int = setting(
        "max.poll.interval.ms",
        300_000,
        read_int(1),
        "a member that does not poll for this long leaves the group",
    )
    max_poll_records: int = setting(
        "max.poll.records", 500, read_int(1), "the most records one poll returns"
    )
    fetch_min_bytes: int = setting(
        "fetch.min.bytes", 1, read_int(0), "a fetch waits for at least this many bytes"
    )
    fetch_max_wait_ms: int = setting(
        "fetch.max.wait.ms", 500, read_int(0), "the longest a fetch waits for fetch.min.bytes"
    )
    fetch_max_bytes: int = setting(
        "fetch.max.bytes", 52_428_800, read_int(0), "the most bytes one fetch response carries"
    )
    max_partition_fetch_bytes: int = setting(
        "max.partition.fetch.bytes",
        1_048_576,
        read_int(0),
        "the most bytes per partition in a fetch",
    )
    isolation_level: str = setting(
        "isolation.level",
        "read_uncommitted",
        read_choice("read_uncommitted", "read_committed"),
        "read_uncommitted, or read_committed (stop at the last stable offset)",
    )
    partition_assignment_strategy: tuple[Any, ...] = setting(
        "partition.assignment.strategy",
        ("range", "cooperative-sticky"),
        read_pluggable_list(*ASSIGNORS),
        "assignors by preference: range, roundrobin, sticky, cooperative-sticky",
    )
    client_rack: str = setting(
        "client.rack",
        "",
        read_str,
        "the consumer's rack, sent with fetches: it then reads from the replica the leader names",
    )
    check_crcs: bool = setting("check.crcs", True, read_bool, "verify the CRC of fetched batches")
    exclude_internal_topics: bool = setting(
        "exclude.internal.topics", True, read_bool, "pattern subscriptions skip internal topics"
    )
    allow_auto_create_topics: bool = setting(
        "allow.auto.create.topics",
        True,
        read_bool,
        "subscribing to a missing topic may create it (if the broker allows)",
    )
    default_api_timeout_ms: int = setting(
        "default.api.timeout.ms",
        60_000,
        read_int(0),
        "the timeout of blocking calls that take none",
    )
    key_deserializer: Any = setting(  # noqa: RUF009
        "key.deserializer", "bytes", read_pluggable(*SERIALIZERS), "bytes, str, json, or a callable"
    )
    value_deserializer: Any = setting(  # noqa: RUF009
        "value.deserializer",
        "bytes",
        read_pluggable(*SERIALIZERS),
        "bytes, str, json, or a callable",
    )

    def _checked(self, given: set[str]) -> Self:
        config = super()._checked(given)
        changes: dict[str, Any] = {}
        if self.heartbeat_interval_ms >= self.session_timeout_ms:
            raise ConfigError(
                f"heartbeat.interval.ms={self.heartbeat_interval_ms} must be lower than "
                f"session.timeout.ms={self.session_timeout_ms}"
            )
        if self.group_instance_id is not None and self.group_id is None:
            raise ConfigError("group.instance.id needs a group.id")
        if "client.id" not in given:
            group = f"{self.group_id}-" if self.group_id else ""
            changes["client_id"] = f"consumer-{group}{next(_client_ids)}"
        if self.group_id is None and "enable.auto.commit" not in given:
            changes["enable_auto_commit"] = False  # nothing to commit to without a group
        elif self.group_id is None and self.enable_auto_commit:
            raise ConfigError("enable.auto.commit=true needs a group.id")
        return attrs.evolve(config, **changes) if changes else config


@attrs.frozen(kw_only=True)
class AdminConfig(ClientConfig):
    KIND: ClassVar[str] = "admin"

    retries: int = setting(
        "retries",
        2_147_483_647,
        read_int(0),
        "how often a failed request is retried (within its timeout)",
    )
    default_api_timeout_ms: int = setting(
        "default.api.timeout.ms",
        60_000,
        read_int(0),
        "the timeout of blocking calls that take none",
    )

    def _checked(self, given: set[str]) -> Self:
        config = super()._checked(given)
        if "client.id" not in given:
            return attrs.evolve(config, client_id=f"adminclient-{next(_client_ids)}")
        return config
