"""Kafka's ZooKeeper layout and operations on kazoo, for trio (see `client` and `znodes`)."""

from gregor.broker.zk.client import (
    MATCH_ANY_VERSION,
    BrokerIdInUseError,
    ControllerMovedError,
    KafkaZkClient,
    TopicExistsError,
    UpdateLeaderAndIsrResult,
)
from gregor.broker.zk.session import (
    SessionListener,
    ZooKeeperClosedError,
    ZooKeeperError,
    ZooKeeperSessionExpiredError,
)
from gregor.broker.zk.znodes import (
    BrokerEndpoint,
    BrokerRegistration,
    LeaderAndIsr,
    ProducerIdBlock,
    ReplicaAssignment,
    TopicAssignment,
    TopicPartition,
    ZNodeDataError,
)

__all__ = [
    "MATCH_ANY_VERSION",
    "BrokerEndpoint",
    "BrokerIdInUseError",
    "BrokerRegistration",
    "ControllerMovedError",
    "KafkaZkClient",
    "LeaderAndIsr",
    "ProducerIdBlock",
    "ReplicaAssignment",
    "SessionListener",
    "TopicAssignment",
    "TopicExistsError",
    "TopicPartition",
    "UpdateLeaderAndIsrResult",
    "ZNodeDataError",
    "ZooKeeperClosedError",
    "ZooKeeperError",
    "ZooKeeperSessionExpiredError",
]
