"""Replication policies: how a mirrored topic is named on the target, and how a topic's
source is told from its name (MM2's ReplicationPolicy, same names and same answers).

DefaultReplicationPolicy names the copy of A's `orders` `A.orders` (the separator is
`replication.policy.separator`); a topic named `A.orders` on B is therefore known to come
from A, which is what prevents loops. IdentityReplicationPolicy keeps the name, and so cannot
tell where a topic came from: with it the topology must have no cycles (as in MM2).
"""

from __future__ import annotations

import importlib

DEFAULT_POLICY = "org.apache.kafka.connect.mirror.DefaultReplicationPolicy"
IDENTITY_POLICY = "org.apache.kafka.connect.mirror.IdentityReplicationPolicy"


def _java_split(text: str, separator: str) -> list[str]:
    """Java's String.split on a literal: trailing empty parts are dropped."""
    parts = text.split(separator)
    while parts and not parts[-1]:
        parts.pop()
    return parts


class DefaultReplicationPolicy:
    def __init__(
        self,
        separator: str = ".",
        *,
        internal_separator: bool = True,
        heartbeats_topic: str = "heartbeats",
    ) -> None:
        if not separator:
            raise ValueError("replication.policy.separator must not be empty")
        self.separator = separator
        self._internal_separator = separator if internal_separator else "."
        self._heartbeats = heartbeats_topic

    def __repr__(self) -> str:
        return f"{type(self).__name__}(separator={self.separator!r})"

    def format_remote_topic(self, source_alias: str, topic: str) -> str:
        return source_alias + self.separator + topic

    def topic_source(self, topic: str) -> str | None:
        """The cluster a remote topic comes from (None: not a remote topic)."""
        parts = _java_split(topic, self.separator)
        return parts[0] if len(parts) >= 2 else None

    def upstream_topic(self, topic: str) -> str | None:
        """The topic's name one hop upstream (None: not a remote topic)."""
        source = self.topic_source(topic)
        return None if source is None else topic[len(source) + len(self.separator) :]

    def original_topic(self, topic: str) -> str:
        """The topic's name where it was first written, however many hops ago."""
        upstream = self.upstream_topic(topic)
        return topic if upstream is None or upstream == topic else self.original_topic(upstream)

    # -- MM2's own topics ------------------------------------------------------------------

    def _internal_suffix(self) -> str:
        return self._internal_separator + "internal"

    def offset_syncs_topic(self, alias: str) -> str:
        return "mm2-offset-syncs" + self._internal_separator + alias + self._internal_suffix()

    def checkpoints_topic(self, alias: str) -> str:
        return alias + self._internal_separator + "checkpoints" + self._internal_suffix()

    def heartbeats_topic(self) -> str:
        return self._heartbeats

    def is_checkpoints_topic(self, topic: str) -> bool:
        return topic.endswith(self._internal_separator + "checkpoints" + self._internal_suffix())

    def is_heartbeats_topic(self, topic: str) -> bool:
        return self.original_topic(topic) == self._heartbeats

    def is_mm2_internal_topic(self, topic: str) -> bool:
        return topic.endswith(self._internal_suffix())

    def is_internal_topic(self, topic: str) -> bool:
        """Never mirrored: Kafka's internal topics, MM2's, and Connect's."""
        return (
            topic.endswith((".internal", "-internal"))
            or topic.startswith(("__", "."))
            or self.is_mm2_internal_topic(topic)
        )


class IdentityReplicationPolicy(DefaultReplicationPolicy):
    """Keeps topic names (heartbeats excepted: they are renamed as by the default policy, so
    their path shows). `source.cluster.alias`, if set, is every topic's source."""

    def __init__(
        self,
        separator: str = ".",
        *,
        internal_separator: bool = True,
        heartbeats_topic: str = "heartbeats",
        source_alias: str | None = None,
    ) -> None:
        super().__init__(
            separator, internal_separator=internal_separator, heartbeats_topic=heartbeats_topic
        )
        self.source_alias = source_alias

    def _heartbeat_like(self, topic: str) -> bool:
        return topic.endswith(self._heartbeats)

    def format_remote_topic(self, source_alias: str, topic: str) -> str:
        if self._heartbeat_like(topic):
            return super().format_remote_topic(source_alias, topic)
        return topic

    def topic_source(self, topic: str) -> str | None:
        if self._heartbeat_like(topic):
            return super().topic_source(topic)
        return self.source_alias

    def upstream_topic(self, topic: str) -> str | None:
        if self._heartbeat_like(topic):
            return super().upstream_topic(topic)
        return topic


ReplicationPolicy = DefaultReplicationPolicy

_POLICIES: dict[str, type[DefaultReplicationPolicy]] = {
    DEFAULT_POLICY: DefaultReplicationPolicy,
    IDENTITY_POLICY: IdentityReplicationPolicy,
}


def policy_from_config(
    name: str,
    *,
    separator: str = ".",
    internal_separator: bool = True,
    heartbeats_topic: str = "heartbeats",
    source_alias: str | None = None,
) -> DefaultReplicationPolicy:
    """The policy `replication.policy.class` names: MM2's class name or its simple name, or
    a Python class of one's own as `module:Class` (MM2 users write custom policies in Java;
    here a subclass of DefaultReplicationPolicy, constructed with the same settings)."""
    by_simple = {full.rsplit(".", 1)[1]: cls for full, cls in _POLICIES.items()}
    cls = _POLICIES.get(name) or by_simple.get(name)
    if cls is None and ":" in name:
        cls = _python_policy(name)
    if cls is None:
        raise ValueError(
            f"{name!r} is not a replication policy gregor-mirror knows "
            f"(one of {', '.join(sorted(_POLICIES))}, or a Python subclass of "
            "gregor.mirror.DefaultReplicationPolicy as module:Class)"
        )
    if issubclass(cls, IdentityReplicationPolicy):
        return cls(
            separator,
            internal_separator=internal_separator,
            heartbeats_topic=heartbeats_topic,
            source_alias=source_alias,
        )
    return cls(separator, internal_separator=internal_separator, heartbeats_topic=heartbeats_topic)


def _python_policy(name: str) -> type[DefaultReplicationPolicy]:
    module, _, attribute = name.partition(":")
    try:
        found = getattr(importlib.import_module(module), attribute)
    except Exception as exc:  # whatever importing it raised: a bad config, reported
        raise ValueError(f"{name!r} cannot be loaded ({type(exc).__name__}: {exc})") from None
    if not (isinstance(found, type) and issubclass(found, DefaultReplicationPolicy)):
        raise ValueError(f"{name!r} is not a subclass of gregor.mirror.DefaultReplicationPolicy")
    return found


def is_cycle(policy: DefaultReplicationPolicy, topic: str, target_alias: str) -> bool:
    """Whether the topic came from the target cluster, one or more hops ago (MM2's isCycle):
    mirroring it there would loop."""
    source = policy.topic_source(topic)
    if source is None:
        return False
    if source == target_alias:
        return True
    upstream = policy.upstream_topic(topic)
    if upstream is None or upstream == topic:  # the identity policy: no way to know
        return False
    return is_cycle(policy, upstream, target_alias)
