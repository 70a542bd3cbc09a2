"""Topics the broker creates itself: the coordinators' internal topics on first use, and
the topics a Metadata request names when `auto.create.topics.enable` is on.

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

Auto-creation is a ZooKeeper-mode broker's: the assignment znode is written with
`num.partitions` and `default.replication.factor`, and the controller creates the
partitions.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import attrs

from gregor.broker.config import BrokerConfig
from gregor.broker.controller.admin import NewTopic, TopicAdmin
from gregor.broker.topic_names import CONSUMER_OFFSETS, TRANSACTION_STATE, is_internal
from gregor.broker.zk import KafkaZkClient
from gregor.protocol.errors import ErrorCode, KafkaError, TopicAlreadyExistsError
from gregor.storage.config import LogConfig

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


class TopicCreator:
    """Creates topics through ZooKeeper; internal ones one creation per topic at a time."""

    def __init__(
        self, config: BrokerConfig, zk: KafkaZkClient, log_defaults: Callable[[], LogConfig]
    ) -> None:
        self.config = config
        self.zk = zk
        self.log_defaults = log_defaults  # the current defaults (dynamic broker configs)
        self._in_flight: set[str] = set()

    async def auto_create(self, names: list[str]) -> dict[str, int]:
        """Create topics a Metadata request named; the error code to report for each:
        LEADER_NOT_AVAILABLE while it has no leader yet."""
        config = self.config
        admin = TopicAdmin(
            self.zk,
            config.num_partitions,
            config.default_replication_factor,
            self.log_defaults(),
        )
        out: dict[str, int] = {}
        for name in names:
            try:
                if is_internal(name):
                    await self.create_internal(name)  # with their own settings
                else:
                    await admin.create_topic(NewTopic(name), validate_only=False)
            except TopicAlreadyExistsError:
                pass
            except KafkaError as exc:
                log.info("cannot auto-create topic %s: %s", name, exc)
                out[name] = exc.code
                continue
            out[name] = ErrorCode.LEADER_NOT_AVAILABLE
        return out

    async def create_internal(self, name: str) -> None:
        """Create the topic unless it exists (or is being created); errors are logged, the
        next FindCoordinator tries again."""
        if name in self._in_flight:
            return
        self._in_flight.add(name)
        try:
            await self._create(internal_topic(self.config, name))
        except TopicAlreadyExistsError:
            pass
        except KafkaError as exc:
            log.warning("cannot create internal topic %s: %s", name, exc)
        finally:
            self._in_flight.discard(name)

    async def _create(self, topic: InternalTopic) -> None:
        admin = TopicAdmin(self.zk, topic.partitions, topic.replication_factor, self.log_defaults())
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
