"""The coordinators' internal topics, created on first use.

The first FindCoordinator for a group (or a transactional id) finds no `__consumer_offsets`
(or `__transaction_state`): the broker creates the topic through ZooKeeper, as Kafka's
auto-creation does, and answers COORDINATOR_NOT_AVAILABLE until the controller has elected
its leaders; clients retry. The topics are compacted, with Kafka's settings:

- `__consumer_offsets`: `offsets.topic.num.partitions` partitions at
  `offsets.topic.replication.factor`, segments of `offsets.topic.segment.bytes`, the
  producer's compression;
- `__transaction_state`: `transaction.state.log.num.partitions` at
  `transaction.state.log.replication.factor`, `min.insync.replicas` of
  `transaction.state.log.min.isr`, no unclean leader election, uncompressed.

A replication factor larger than the number of live brokers is lowered to it, with a
warning, so a small cluster still gets its coordinators.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import attrs

from gregor.broker.controller.admin import NewTopic, TopicAdmin
from gregor.broker.topic_names import CONSUMER_OFFSETS, TRANSACTION_STATE
from gregor.protocol.errors import KafkaError, TopicAlreadyExistsError

if TYPE_CHECKING:
    from gregor.broker.config import BrokerConfig
    from gregor.broker.server import Broker

log = logging.getLogger(__name__)


@attrs.frozen(slots=True)
class InternalTopic:
    name: str
    partitions: int
    replication_factor: int
    configs: dict[str, str]


def internal_topic(config: BrokerConfig, name: str) -> InternalTopic:
    if name == CONSUMER_OFFSETS:
        return InternalTopic(
            name,
            config.offsets_topic_num_partitions,
            config.offsets_topic_replication_factor,
            {
                "cleanup.policy": "compact",
                "segment.bytes": str(config.offsets_topic_segment_bytes),
                "compression.type": "producer",
            },
        )
    if name == TRANSACTION_STATE:
        return InternalTopic(
            name,
            config.transaction_state_log_num_partitions,
            config.transaction_state_log_replication_factor,
            {
                "cleanup.policy": "compact",
                "segment.bytes": str(config.transaction_state_log_segment_bytes),
                "min.insync.replicas": str(config.transaction_state_log_min_isr),
                "unclean.leader.election.enable": "false",
                "compression.type": "uncompressed",
            },
        )
    raise ValueError(f"{name} is not an internal topic")


class InternalTopicCreator:
    """Creates internal topics, one creation per topic at a time."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self._in_flight: set[str] = set()

    async def create(self, name: str) -> None:
        """Create the topic unless it exists (or is being created); errors are logged, the
        next FindCoordinator tries again."""
        if name in self._in_flight:
            return
        self._in_flight.add(name)
        try:
            await self._create(internal_topic(self.broker.config, name))
        except TopicAlreadyExistsError:
            pass
        except KafkaError as exc:
            log.warning("cannot create internal topic %s: %s", name, exc)
        finally:
            self._in_flight.discard(name)

    async def _create(self, topic: InternalTopic) -> None:
        broker = self.broker
        admin = TopicAdmin(
            broker.zk,
            topic.partitions,
            topic.replication_factor,
            broker.log_defaults,
        )
        live = len(await admin.live_brokers())
        factor = topic.replication_factor
        if 0 < live < factor:
            log.warning(
                "%s: only %d live brokers for replication factor %d; creating it with %d replicas",
                topic.name,
                live,
                factor,
                live,
            )
            factor = live
        created = await admin.create_topic(
            NewTopic(topic.name, topic.partitions, factor, configs=topic.configs),
            validate_only=False,
        )
        log.info(
            "created internal topic %s: %d partitions, replication factor %d",
            topic.name,
            created.num_partitions,
            created.replication_factor,
        )
