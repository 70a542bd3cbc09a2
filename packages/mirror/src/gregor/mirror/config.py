"""The mirror's configuration: MirrorMaker 2's `mm2.properties`, with MM2's names and defaults.

    clusters = A, B
    A.bootstrap.servers = a1:9092
    B.bootstrap.servers = b1:9092
    A->B.enabled = true
    A->B.topics = orders.*, payments

A setting is looked up as `A->B.<name>`, then `<name>`, then MM2's default. Client settings
go to the clients of a cluster: `A.<client setting>` to all of them, `A.consumer.<setting>`,
`A.producer.<setting>` and `A.admin.<setting>` to one kind. A bad value fails at load with the
key, the value and the rule.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import attrs

from gregor.client import AdminConfig, ConfigError, ConsumerConfig, ProducerConfig
from gregor.client.exporter import parse_listener
from gregor.mirror.policy import ReplicationPolicy, policy_from_config

T = TypeVar("T")

# MM2's defaults (MirrorSourceConfig, MirrorCheckpointConfig, MirrorHeartbeatConfig).
DEFAULT_TOPICS_EXCLUDE = r".*[\-\.]internal, .*\.replica, __.*"
DEFAULT_GROUPS_EXCLUDE = r"console-consumer-.*, connect-.*, __.*"
DEFAULT_CONFIG_PROPERTIES_EXCLUDE = (
    r"follower\.replication\.throttled\.replicas, leader\.replication\.throttled\.replicas, "
    r"message\.timestamp\.difference\.max\.ms, message\.timestamp\.type, "
    r"unclean\.leader\.election\.enable, min\.insync\.replicas"
)
_CLIENT_KINDS = ("consumer", "producer", "admin")
_ALIAS = re.compile(r"[A-Za-z0-9_\-]+")
# Connect worker settings MM2 users keep per cluster; they are not client settings.
PROMETHEUS_LISTENER = "metrics.prometheus.listener"
LOG_FORMAT = "log.format"  # text, or json: one JSON object per line (as the broker's)
# Connect's worker setting: how long a stopping task may take before it is abandoned.
SHUTDOWN_TIMEOUT = "task.shutdown.graceful.timeout.ms"
_WORKER_KEYS = re.compile(r"(offset|config|status)\.storage\..*|.*replication\.factor|tasks\.max")


class MirrorConfigError(ConfigError):
    """An mm2.properties that cannot be run: names the key, the value and the rule."""


# -- reading mm2.properties ----------------------------------------------------------------


def parse_properties(text: str) -> dict[str, str]:
    """Java properties as MM2 reads them: `#`/`!` comments, `=`, `:` or blank as separator,
    a trailing backslash continues a line."""
    props: dict[str, str] = {}
    joined = re.sub(r"(?<!\\)\\\n[ \t\f]*", "", text)
    for raw in joined.splitlines():
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        match = re.match(r"((?:\\.|[^=:\s\\])+)\s*[=:\s]?\s*(.*)$", line)
        if match:
            key, value = (re.sub(r"\\(.)", r"\1", part) for part in match.groups())
            props[key] = value
    return props


def load(path: str | Path) -> MirrorConfig:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise MirrorConfigError(f"cannot read {path}: {exc}") from exc
    return MirrorConfig.from_properties(parse_properties(text))


# -- value readers -------------------------------------------------------------------------


def _bool(value: str) -> bool:
    lowered = value.strip().lower()
    if lowered not in ("true", "false"):
        raise ValueError("must be true or false")
    return lowered == "true"


def _int(lo: int) -> Callable[[str], int]:
    def read(value: str) -> int:
        try:
            number = int(value.strip())
        except ValueError:
            raise ValueError("must be an integer") from None
        if number < lo:
            raise ValueError(f"must be at least {lo}")
        return number

    return read


def _replication_factor(value: str) -> int:
    number = _int(-1)(value)
    if number == 0:
        raise ValueError("must be at least 1, or -1 for the broker's default")
    return number


def _choice(*choices: str) -> Callable[[str], str]:
    def read(value: str) -> str:
        if value.strip().lower() not in choices:
            raise ValueError(f"must be one of {', '.join(choices)}")
        return value.strip().lower()

    return read


def _patterns(value: str) -> tuple[re.Pattern[str], ...]:
    out = []
    for item in (part.strip() for part in value.split(",")):
        if item:
            try:
                out.append(re.compile(item))
            except re.error as exc:
                raise ValueError(f"{item!r} is not a regular expression: {exc}") from None
    return tuple(out)


def _list(value: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in value.split(",") if part.strip())


@attrs.frozen
class Filter:
    """MM2's include/exclude regex lists: a name must match an include and no exclude, whole."""

    include: tuple[re.Pattern[str], ...]
    exclude: tuple[re.Pattern[str], ...]

    def __call__(self, name: str) -> bool:
        return any(p.fullmatch(name) for p in self.include) and not any(
            p.fullmatch(name) for p in self.exclude
        )


# -- the configuration ---------------------------------------------------------------------


@attrs.frozen
class ClusterConfig:
    alias: str
    common: Mapping[str, str]  # A.<client setting>
    consumer: Mapping[str, str]  # A.consumer.<setting>
    producer: Mapping[str, str]
    admin: Mapping[str, str]

    def consumer_config(self, **extra: Any) -> dict[str, Any]:
        return {**self._common_for(ConsumerConfig), **self.consumer, **extra}

    def producer_config(self, **extra: Any) -> dict[str, Any]:
        return {**self._common_for(ProducerConfig), **self.producer, **extra}

    def admin_config(self, **extra: Any) -> dict[str, Any]:
        return {**self._common_for(AdminConfig), **self.admin, **extra}

    def _common_for(
        self, kind: type[ConsumerConfig | ProducerConfig | AdminConfig]
    ) -> dict[str, str]:
        """The cluster-wide settings this kind of client has: as the Java clients MM2 runs
        ignore the others (`A.isolation.level` is for the consumer only)."""
        return {key: value for key, value in self.common.items() if kind.knows(key)}

    def check(self) -> None:
        """Every client this cluster gets must take its settings (at start, not at connect):
        MirrorConfigError naming the setting otherwise."""
        for key, value in self.common.items():
            if not any(kind.knows(key) for kind in (ConsumerConfig, ProducerConfig, AdminConfig)):
                raise MirrorConfigError(
                    f"{self.alias}.{key} = {value!r}: not a setting of any client"
                )
        for name, kind, settings in (
            ("consumer", ConsumerConfig, self.consumer_config()),
            ("producer", ProducerConfig, self.producer_config()),
            ("admin", AdminConfig, self.admin_config()),
        ):
            try:
                kind.from_dict(settings)
            except ConfigError as exc:
                raise MirrorConfigError(
                    f"{self.alias}: its {name} settings ({self.alias}.{name}.* and "
                    f"{self.alias}.*): {exc}"
                ) from None


@attrs.frozen
class FlowConfig:
    """One replication flow `source->target` and the settings it runs with."""

    source: ClusterConfig
    target: ClusterConfig
    enabled: bool
    topics: Filter
    groups: Filter
    config_properties_exclude: tuple[re.Pattern[str], ...]
    policy: ReplicationPolicy
    replication_factor: int
    offset_syncs_replication_factor: int
    checkpoints_replication_factor: int
    heartbeats_replication_factor: int
    sync_topic_configs: bool
    sync_topic_configs_interval: float
    sync_topic_acls: bool
    sync_topic_acls_interval: float
    emit_checkpoints: bool
    emit_checkpoints_interval: float
    emit_heartbeats: bool
    emit_heartbeats_interval: float
    sync_group_offsets: bool
    sync_group_offsets_interval: float
    refresh_topics_interval: float
    refresh_groups_interval: float
    offset_syncs_location: str  # "source" or "target"
    exactly_once: bool
    # Every enabled flow of the configuration, this one among them: where a record goes
    # next once mirrored (`gregor.mirror.topics.comes_back`).
    network: tuple[FlowConfig, ...] = attrs.field(default=(), eq=False, repr=False)

    @property
    def name(self) -> str:
        return f"{self.source.alias}->{self.target.alias}"

    @property
    def offset_syncs_cluster(self) -> ClusterConfig:
        return self.source if self.offset_syncs_location == "source" else self.target

    @property
    def offset_syncs_topic(self) -> str:
        # Named for the other cluster of the flow, as MirrorSourceConfig names it.
        other = self.target if self.offset_syncs_location == "source" else self.source
        return self.policy.offset_syncs_topic(other.alias)

    @property
    def checkpoints_topic(self) -> str:
        return self.policy.checkpoints_topic(self.source.alias)

    def excluded_config(self, name: str) -> bool:
        return any(p.fullmatch(name) for p in self.config_properties_exclude)


@attrs.frozen
class MirrorConfig:
    clusters: Mapping[str, ClusterConfig]
    flows: tuple[FlowConfig, ...]  # every source->target pair, enabled or not
    # `metrics.prometheus.listener = http://HOST:PORT`: where the metrics are served.
    prometheus_listener: tuple[str, int] | None = None
    log_format: str = "text"
    # On SIGTERM, how long the flows may take to deliver and sync what is in flight.
    shutdown_timeout: float = 5.0

    def enabled_flows(self, targets: set[str] | None = None) -> list[FlowConfig]:
        return [
            f for f in self.flows if f.enabled and (targets is None or f.target.alias in targets)
        ]

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> MirrorConfig:
        props = {k.strip(): v.strip() for k, v in props.items()}
        aliases = _list(props.get("clusters", ""))
        if not aliases:
            raise MirrorConfigError("clusters: missing; name the clusters, e.g. clusters = A, B")
        for alias in aliases:
            if not _ALIAS.fullmatch(alias):
                raise MirrorConfigError(
                    f"clusters = {props['clusters']!r}: {alias!r} is not a valid cluster alias "
                    "(letters, digits, '_' and '-')"
                )
        if len(set(aliases)) != len(aliases):
            raise MirrorConfigError(f"clusters = {props['clusters']!r}: an alias is repeated")
        clusters = {alias: _cluster(alias, props) for alias in aliases}
        for cluster in clusters.values():
            cluster.check()
        flows = tuple(
            _flow(clusters[s], clusters[t], props) for s in aliases for t in aliases if s != t
        )
        enabled = tuple(f for f in flows if f.enabled)
        flows = tuple(attrs.evolve(f, network=enabled) for f in flows)
        for key in props:
            if "->" in key:
                pair = key.split(".", 1)[0]
                source, _, target = pair.partition("->")
                if source not in clusters or target not in clusters or source == target:
                    raise MirrorConfigError(
                        f"{key}: {pair!r} is not a flow between two of the clusters "
                        f"{', '.join(aliases)}"
                    )
        listener = props.get(PROMETHEUS_LISTENER)
        try:
            prometheus = parse_listener(listener) if listener else None
        except ValueError as exc:
            raise MirrorConfigError(f"{PROMETHEUS_LISTENER} = {listener!r}: {exc}") from None
        log_format = props.get(LOG_FORMAT, "text").lower()
        if log_format not in ("text", "json"):
            raise MirrorConfigError(f"{LOG_FORMAT} = {log_format!r}: must be text or json")
        try:
            shutdown_ms = _int(0)(props.get(SHUTDOWN_TIMEOUT, "5000"))
        except ValueError as exc:
            raise MirrorConfigError(
                f"{SHUTDOWN_TIMEOUT} = {props[SHUTDOWN_TIMEOUT]!r}: {exc}"
            ) from None
        return cls(clusters, flows, prometheus, log_format, shutdown_ms / 1000)


def _cluster(alias: str, props: Mapping[str, str]) -> ClusterConfig:
    prefix = alias + "."
    mine = {k[len(prefix) :]: v for k, v in props.items() if k.startswith(prefix)}
    if "bootstrap.servers" not in mine:
        raise MirrorConfigError(f"{alias}.bootstrap.servers: missing for cluster {alias!r}")
    kinds: dict[str, dict[str, str]] = {kind: {} for kind in _CLIENT_KINDS}
    common: dict[str, str] = {}
    for key, value in mine.items():
        kind, _, rest = key.partition(".")
        if kind in kinds and rest:
            kinds[kind][rest] = value
        elif key not in _FLOW_SETTINGS and not _WORKER_KEYS.fullmatch(key):
            common[key] = value
    return ClusterConfig(alias, common, kinds["consumer"], kinds["producer"], kinds["admin"])


# MM2 setting -> (reader, default). A per-cluster prefix (`B.emit.heartbeats.enabled`) is not
# read: MM2 takes flow settings per flow (`A->B.`) or globally.
_FLOW_SETTINGS: dict[str, tuple[Callable[[str], Any], str]] = {
    "enabled": (_bool, "false"),
    "topics": (_patterns, ".*"),
    "topics.exclude": (_patterns, DEFAULT_TOPICS_EXCLUDE),
    "groups": (_patterns, ".*"),
    "groups.exclude": (_patterns, DEFAULT_GROUPS_EXCLUDE),
    "config.properties.exclude": (_patterns, DEFAULT_CONFIG_PROPERTIES_EXCLUDE),
    "replication.factor": (_replication_factor, "2"),
    "offset-syncs.topic.replication.factor": (_replication_factor, "3"),
    "checkpoints.topic.replication.factor": (_replication_factor, "3"),
    "heartbeats.topic.replication.factor": (_replication_factor, "3"),
    "sync.topic.configs.enabled": (_bool, "true"),
    "sync.topic.configs.interval.seconds": (_int(1), "600"),
    "sync.topic.acls.enabled": (_bool, "true"),
    "sync.topic.acls.interval.seconds": (_int(1), "600"),
    "emit.checkpoints.enabled": (_bool, "true"),
    "emit.checkpoints.interval.seconds": (_int(1), "60"),
    "emit.heartbeats.enabled": (_bool, "true"),
    "emit.heartbeats.interval.seconds": (_int(1), "1"),
    "sync.group.offsets.enabled": (_bool, "false"),
    "sync.group.offsets.interval.seconds": (_int(1), "60"),
    "refresh.topics.interval.seconds": (_int(1), "600"),
    "refresh.groups.interval.seconds": (_int(1), "600"),
    "offset-syncs.topic.location": (_choice("source", "target"), "source"),
    # KIP-656: the connector's `exactly.once.support` and the worker's
    # `exactly.once.source.support`; the shorthand `enabled` is accepted too.
    "exactly.once.support": (_choice("requested", "required", "enabled", "disabled"), "requested"),
    "exactly.once.source.support": (_choice("disabled", "preparing", "enabled"), "disabled"),
    "replication.policy.class": (str, "org.apache.kafka.connect.mirror.DefaultReplicationPolicy"),
    "replication.policy.separator": (str, "."),
    "replication.policy.internal.topic.separator.enabled": (_bool, "true"),
    "heartbeats.topic": (str, "heartbeats"),
}
# Topic filters: MM2's older names (KIP-629) are still read.
_OLD_NAMES = {"topics.blacklist": "topics.exclude", "groups.blacklist": "groups.exclude"}


def _flow(source: ClusterConfig, target: ClusterConfig, props: Mapping[str, str]) -> FlowConfig:
    pair = f"{source.alias}->{target.alias}"

    def given(name: str) -> str | None:
        """The key that sets `name` for this flow, if any."""
        old = [o for o, new in _OLD_NAMES.items() if new == name]
        keys = [f"{pair}.{name}", name] + [f"{pair}.{o}" for o in old] + old
        return next((key for key in keys if key in props), None)

    def get(name: str) -> Any:
        reader, default = _FLOW_SETTINGS[name]
        key = given(name)
        if key is None:
            return reader(default)
        try:
            return reader(props[key])
        except ValueError as exc:
            raise MirrorConfigError(f"{key} = {props[key]!r}: {exc}") from None

    alias = props.get(f"{pair}.source.cluster.alias", props.get("source.cluster.alias"))
    try:
        policy = policy_from_config(
            get("replication.policy.class"),
            separator=get("replication.policy.separator"),
            internal_separator=get("replication.policy.internal.topic.separator.enabled"),
            heartbeats_topic=get("heartbeats.topic"),
            source_alias=alias,
        )
    except ValueError as exc:
        raise MirrorConfigError(f"replication.policy.class: {exc}") from None
    exactly_once = get("exactly.once.support") in ("required", "enabled") or (
        get("exactly.once.source.support") == "enabled"
    )
    syncs_location = get("offset-syncs.topic.location")
    if exactly_once:
        # The offset syncs are where the copy resumes: exactly once writes them in the
        # transaction of the records they cover, so they must be on the target.
        key = given("offset-syncs.topic.location")
        if key is not None and syncs_location != "target":
            raise MirrorConfigError(
                f"{key} = {props[key]!r}: must be target when exactly once is enabled for "
                f"{pair} (the offset syncs are written in the target's transactions)"
            )
        syncs_location = "target"
    return FlowConfig(
        source=source,
        target=target,
        enabled=get("enabled"),
        topics=Filter(get("topics"), get("topics.exclude")),
        groups=Filter(get("groups"), get("groups.exclude")),
        config_properties_exclude=get("config.properties.exclude"),
        policy=policy,
        replication_factor=get("replication.factor"),
        offset_syncs_replication_factor=get("offset-syncs.topic.replication.factor"),
        checkpoints_replication_factor=get("checkpoints.topic.replication.factor"),
        heartbeats_replication_factor=get("heartbeats.topic.replication.factor"),
        sync_topic_configs=get("sync.topic.configs.enabled"),
        sync_topic_configs_interval=get("sync.topic.configs.interval.seconds"),
        sync_topic_acls=get("sync.topic.acls.enabled"),
        sync_topic_acls_interval=get("sync.topic.acls.interval.seconds"),
        emit_checkpoints=get("emit.checkpoints.enabled"),
        emit_checkpoints_interval=get("emit.checkpoints.interval.seconds"),
        emit_heartbeats=get("emit.heartbeats.enabled"),
        emit_heartbeats_interval=get("emit.heartbeats.interval.seconds"),
        sync_group_offsets=get("sync.group.offsets.enabled"),
        sync_group_offsets_interval=get("sync.group.offsets.interval.seconds"),
        refresh_topics_interval=get("refresh.topics.interval.seconds"),
        refresh_groups_interval=get("refresh.groups.interval.seconds"),
        offset_syncs_location=syncs_location,
        exactly_once=exactly_once,
    )
