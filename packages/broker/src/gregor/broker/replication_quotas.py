"""Replication throttles, as Kafka's for reassignments: a byte rate per broker for each side.

- `leader.replication.throttled.rate` (dynamic broker config): the bytes per second this
  broker, as a leader, sends in all to the followers of its throttled replicas;
  `follower.replication.throttled.rate`: what it fetches in all, as a follower, for its own.
- Which replicas are throttled is a topic config: `leader.replication.throttled.replicas`
  and `follower.replication.throttled.replicas`, a list of `partition:broker` (the broker
  the throttle applies on: the leader's for the first, the follower's for the second) or
  `*` for every replica of the topic.

As Kafka does, only replicas out of the ISR are throttled (a reassignment's new ones, a
follower catching up), never an in-sync follower, so acks=all producers are not held back.
While the throttled bytes are over the rate, the leader answers those partitions without
records and the follower leaves them out of its fetches. The rate is held with the token
bucket of the client quotas (a burst of quota.window.num x quota.window.size.seconds).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping

from gregor.broker.quotas import TokenBucket

log = logging.getLogger(__name__)

LEADER_RATE = "leader.replication.throttled.rate"
FOLLOWER_RATE = "follower.replication.throttled.rate"
LEADER_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS = "follower.replication.throttled.replicas"
UNLIMITED = 2**63 - 1  # Kafka's default rate: Long.MAX_VALUE


def throttled_partitions(value: str, broker_id: int) -> frozenset[int] | None:
    """The partitions a `*.replication.throttled.replicas` value throttles on this broker;
    None for all ("*"). Entries that do not parse are ignored (and logged)."""
    text = value.strip()
    if text == "*":
        return None
    out = set()
    for entry in filter(None, (e.strip() for e in text.split(","))):
        partition, colon, broker = entry.partition(":")
        if not colon or not partition.strip().isdigit() or not broker.strip().isdigit():
            log.warning("ignoring throttled replica %r: not partition:broker", entry)
        elif int(broker) == broker_id:
            out.add(int(partition))
    return frozenset(out)


class ReplicationQuota:
    """One side's throttle: its rate, and which replicas of which topics it applies to."""

    def __init__(self, broker_id: int, burst_s: float = 11.0) -> None:
        self.broker_id = broker_id
        self.burst_s = burst_s
        self.rate = math.inf
        self._bucket: TokenBucket | None = None
        self._topics: dict[str, frozenset[int] | None] = {}  # None: every partition

    def set_rate(self, rate: float) -> None:
        if rate >= UNLIMITED:
            rate = math.inf
        if rate != self.rate:
            self.rate = rate
            self._bucket = None if math.isinf(rate) else TokenBucket(self.burst_s, rate, _now())

    def set_replicas(self, topic: str, value: str | None) -> None:
        if not value:
            self._topics.pop(topic, None)
        else:
            self._topics[topic] = throttled_partitions(value, self.broker_id)

    def is_throttled(self, topic: str, partition: int) -> bool:
        if self._bucket is None or topic not in self._topics:
            return False
        partitions = self._topics[topic]
        return partitions is None or partition in partitions

    def exceeded(self) -> bool:
        bucket = self._bucket
        if bucket is None:
            return False
        bucket.record(0, self.rate, _now())
        return bucket.tokens < 0

    def throttle_s(self) -> float:
        """How long until the throttled replicas may move again."""
        bucket = self._bucket
        return 0.0 if bucket is None else bucket.throttle_s(self.rate)

    def record(self, size: int) -> None:
        if self._bucket is not None and size:
            self._bucket.record(size, self.rate, _now())


class ReplicationQuotas:
    """This broker's two throttles, fed by its dynamic configs."""

    def __init__(self, broker_id: int, burst_s: float = 11.0) -> None:
        self.broker_id = broker_id
        self.leader = ReplicationQuota(broker_id, burst_s)
        self.follower = ReplicationQuota(broker_id, burst_s)
        self._broker_configs: dict[str, Mapping[str, str]] = {}
        self._leader_throttled_topics: set[str] = set()

    def broker_config_changed(self, entity: str, config: Mapping[str, str]) -> None:
        """/config/brokers/<id> or /config/brokers/<default> changed."""
        self._broker_configs[entity] = dict(config)
        merged = {**self._broker_configs.get("<default>", {})}
        merged.update(self._broker_configs.get(str(self.broker_id), {}))
        for quota, key in ((self.leader, LEADER_RATE), (self.follower, FOLLOWER_RATE)):
            try:
                quota.set_rate(float(merged.get(key, UNLIMITED)))
            except ValueError:
                log.warning("ignoring %s=%r: not a number", key, merged.get(key))

    def topic_config_changed(self, topic: str, config: Mapping[str, str]) -> None:
        self.leader.set_replicas(topic, config.get(LEADER_REPLICAS))
        self.follower.set_replicas(topic, config.get(FOLLOWER_REPLICAS))
        if config.get(LEADER_REPLICAS):
            self._leader_throttled_topics.add(topic)
        else:
            self._leader_throttled_topics.discard(topic)

    def leader_throttled(self, topic: str) -> bool:
        """Whether the topic has leader-side throttled replicas (on any broker)."""
        return topic in self._leader_throttled_topics


def _now() -> float:
    return time.monotonic()
