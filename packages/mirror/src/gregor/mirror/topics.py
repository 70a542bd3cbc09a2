"""The topics a flow mirrors: which source topics, their remote copies on the target
(created with the source's partition count and configs, grown and re-configured as the
source changes), and MM2's own topics (offset syncs, checkpoints, heartbeats)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from gregor.client import (
    AsyncAdminClient,
    AsyncConsumer,
    ConsumerRecord,
    NewTopic,
    TopicPartition,
)
from gregor.client.admin import ConfigResource, ConfigSource, ResourceType
from gregor.mirror.config import FlowConfig
from gregor.mirror.policy import is_cycle
from gregor.protocol.errors import (
    InvalidConfigError,
    InvalidReplicationFactorError,
    InvalidTopicError,
    PolicyViolationError,
    TopicAlreadyExistsError,
    TopicAuthorizationFailedError,
    UnknownTopicOrPartitionError,
)

log = logging.getLogger("gregor.mirror")

COMPACTED = {"cleanup.policy": "compact"}
# What the target answers about one remote topic, not about the flow: reported, and the
# other topics are mirrored meanwhile.
REFUSED_TOPIC = (
    InvalidConfigError,
    InvalidReplicationFactorError,
    InvalidTopicError,
    PolicyViolationError,
    TopicAuthorizationFailedError,
)


def should_replicate(flow: FlowConfig, topic: str) -> bool:
    """MM2's rule (`passes`), and never a topic whose records would come back to it."""
    return passes(flow, topic) and not comes_back(flow, topic)


def passes(flow: FlowConfig, topic: str) -> bool:
    """MM2's rule: the filter (heartbeats always pass), never internal topics, never a
    topic that came from the target (that would loop)."""
    policy = flow.policy
    return bool(
        (flow.topics(topic) or policy.is_heartbeats_topic(topic))
        and not policy.is_internal_topic(topic)
        and not is_cycle(policy, topic, flow.target.alias)
    )


def comes_back(flow: FlowConfig, topic: str) -> bool:
    """Whether the topic's records, once this flow mirrors them, would be mirrored back into
    the same topic by the enabled flows: the loop a policy that keeps names cannot see in
    them (IdentityReplicationPolicy with A->B and B->A both mirroring `orders`). MM2 loops
    there; gregor-mirror mirrors such a topic in neither direction and says so."""
    home = (flow.source.alias, topic)
    seen: set[tuple[str, str]] = set()
    frontier = [(flow, topic)]
    while frontier:
        step, name = frontier.pop()
        there = (step.target.alias, step.policy.format_remote_topic(step.source.alias, name))
        if there == home:
            return True
        if there in seen:
            continue
        seen.add(there)
        frontier += [(f, there[1]) for f in flow.network
                     if f.source.alias == there[0] and passes(f, there[1])]  # fmt: skip
    return False


async def ensure_topic(
    admin: AsyncAdminClient,
    name: str,
    partitions: int,
    replication_factor: int,
    config: Mapping[str, str],
) -> None:
    """Create the topic unless it exists. A replication factor above the cluster's broker
    count is lowered to it, with a warning (MM2 would fail to start)."""
    if replication_factor > 0:
        brokers = len((await admin.describe_cluster()).brokers)
        if brokers < replication_factor:
            log.warning(
                "topic %s: replication factor %d lowered to the %d brokers of the cluster",
                name,
                replication_factor,
                brokers,
            )
            replication_factor = brokers
    try:
        await admin.create_topics(
            [NewTopic(name, partitions, replication_factor, config=dict(config))]
        )
        log.info("created topic %s (%d partitions)", name, partitions)
    except TopicAlreadyExistsError:
        pass


async def read_to_end(
    config: Mapping[str, Any], topic: str, timeout: float = 30.0
) -> list[ConsumerRecord]:
    """Every record of a topic, from its start to its end now ([] if it does not exist)."""
    settings = {**config, "enable.auto.commit": False, "auto.offset.reset": "earliest"}
    settings.pop("group.id", None)
    async with AsyncConsumer(settings) as consumer:
        topics = await consumer.list_topics(timeout)
        if topic not in topics:
            return []
        partitions = [TopicPartition(topic, p) for p in topics[topic]]
        ends = await consumer.end_offsets(partitions, timeout)
        starts = await consumer.beginning_offsets(partitions, timeout)
        waiting = {tp for tp in partitions if ends.get(tp, 0) > starts.get(tp, 0)}
        consumer.assign(partitions)
        consumer.seek_to_beginning(*partitions)
        records: list[ConsumerRecord] = []
        while waiting:
            batch = await consumer.getmany(timeout=timeout)
            if not batch:
                raise TimeoutError(f"reading {topic}: nothing arrived for {timeout:.0f}s")
            records += batch
            for tp in list(waiting):
                if await consumer.position(tp) >= ends[tp]:
                    waiting.discard(tp)
        return records


class TopicSync:
    """Keeps the flow's remote topics in step with the source's topics."""

    def __init__(self, flow: FlowConfig, source: AsyncAdminClient, target: AsyncAdminClient):
        self.flow = flow
        self.source = source
        self.target = target
        self.looping: set[str] = set()  # the topics not mirrored as they would loop, reported

    def remote(self, topic: str) -> str:
        return self.flow.policy.format_remote_topic(self.flow.source.alias, topic)

    async def refresh(self) -> dict[TopicPartition, TopicPartition]:
        """Create and grow the remote topics; every source partition that has its copy."""
        described = await self.source.describe_topics()
        found = {name: d for name, d in described.items() if not d.internal}
        passing = {name for name in found if passes(self.flow, name)}
        looping = {name for name in passing if comes_back(self.flow, name)}
        for name in sorted(looping - self.looping):
            log.warning(
                "%s: topic %s is not mirrored: the enabled flows would mirror its records "
                "back into it (%s keeps topic names); narrow the flows' topics",
                self.flow.name, name, type(self.flow.policy).__name__,
            )  # fmt: skip
        self.looping = looping
        chosen = {name: len(found[name].partitions) for name in passing - looping}
        existing = {
            name: len(d.partitions) for name, d in (await self.target.describe_topics()).items()
        }
        configs = await self._source_configs([t for t in chosen if self.remote(t) not in existing])
        mapping: dict[TopicPartition, TopicPartition] = {}
        for topic, count in sorted(chosen.items()):
            remote = self.remote(topic)
            have = existing.get(remote)
            try:
                if have is None:
                    await ensure_topic(
                        self.target, remote, count, self.flow.replication_factor, configs[topic]
                    )
                elif have < count:
                    await self.target.create_partitions({remote: count})
                    log.info("%s: %s grown to %d partitions", self.flow.name, remote, count)
            except UnknownTopicOrPartitionError:
                continue
            except REFUSED_TOPIC as exc:
                # (A source config the target does not know (another version), or
                # the target's create policy.) The other topics go on; this one waits.
                log.error(
                    "%s: cannot create %s on %s (%s: %s); it is tried again in %ds",
                    self.flow.name,
                    remote,
                    self.flow.target.alias,
                    type(exc).__name__,
                    exc,
                    self.flow.refresh_topics_interval,
                )
                continue
            for p in range(count):
                mapping[TopicPartition(topic, p)] = TopicPartition(remote, p)
        return mapping

    async def _source_configs(self, topics: list[str]) -> dict[str, dict[str, str]]:
        """The topics' configs set on the source (not defaults), less the excluded ones."""
        if not topics:
            return {}
        try:
            described = await self.source.describe_configs(
                [ConfigResource(ResourceType.TOPIC, t) for t in topics]
            )
        except UnknownTopicOrPartitionError:
            # One was deleted since the last refresh (which drops it from the flow next):
            # the others one by one.
            described = {}
            for topic in topics:
                try:
                    described.update(
                        await self.source.describe_configs(
                            [ConfigResource(ResourceType.TOPIC, topic)]
                        )
                    )
                except UnknownTopicOrPartitionError:
                    log.info("%s: source topic %s is gone", self.flow.name, topic)
        return {
            resource.name: {
                name: entry.value
                for name, entry in entries.items()
                if entry.value is not None
                and entry.source == ConfigSource.DYNAMIC_TOPIC_CONFIG
                and not entry.sensitive
                and not self.flow.excluded_config(name)
            }
            for resource, entries in described.items()
        }

    async def sync_configs(self, topics: list[str]) -> None:
        """Set on each remote topic the source's configs that differ there."""
        wanted = await self._source_configs(topics)
        if not wanted:
            return
        remote = {self.remote(t): cfg for t, cfg in wanted.items()}
        current = await self.target.describe_configs(
            [ConfigResource(ResourceType.TOPIC, t) for t in remote]
        )
        changes = {}
        for resource, entries in current.items():
            differ = {
                name: value
                for name, value in remote[resource.name].items()
                if name not in entries or entries[name].value != value
            }
            if differ:
                changes[resource] = differ
                log.info("%s: %s configs %s", self.flow.name, resource.name, differ)
        if changes:
            try:
                await self.target.alter_configs(changes)
            except REFUSED_TOPIC as exc:  # the others are altered: Kafka takes each alone
                log.error(
                    "%s: topic configs not synced on %s (%s: %s)",
                    self.flow.name,
                    self.flow.target.alias,
                    type(exc).__name__,
                    exc,
                )
