"""The broker settings the controller acts on (a typed subset of BrokerConfig)."""

from __future__ import annotations

import attrs

from gregor.broker.config import BrokerConfig
from gregor.client.security import ClientSecurity, SecuritySettings


@attrs.frozen
class ControllerSettings:
    broker_id: int  # broker.id
    inter_broker_listener: str = "PLAINTEXT"  # inter.broker.listener.name
    delete_topic_enable: bool = True  # delete.topic.enable
    unclean_leader_election_enable: bool = False  # unclean.leader.election.enable
    auto_leader_rebalance_enable: bool = True  # auto.leader.rebalance.enable
    leader_imbalance_per_broker_percentage: int = 10  # leader.imbalance.per.broker.percentage
    leader_imbalance_check_interval_s: float = 300.0  # leader.imbalance.check.interval.seconds
    request_timeout_s: float = 30.0  # controller.socket.timeout.ms
    controlled_shutdown_max_retries: int = 3  # controlled.shutdown.max.retries
    controlled_shutdown_retry_backoff_s: float = 5.0  # controlled.shutdown.retry.backoff.ms
    zookeeper_connection_timeout_s: float = 18.0  # zookeeper.connection.timeout.ms
    # TLS and SASL of the inter-broker listener (inter.broker.listener.name)
    security: SecuritySettings = attrs.field(factory=ClientSecurity)

    @classmethod
    def from_config(
        cls, config: BrokerConfig, security: SecuritySettings | None = None
    ) -> ControllerSettings:
        return cls(
            broker_id=config.broker_id,
            inter_broker_listener=config.inter_broker_listener_name,
            delete_topic_enable=config.delete_topic_enable,
            unclean_leader_election_enable=config.unclean_leader_election_enable,
            auto_leader_rebalance_enable=config.auto_leader_rebalance_enable,
            leader_imbalance_per_broker_percentage=config.leader_imbalance_per_broker_percentage,
            leader_imbalance_check_interval_s=config.leader_imbalance_check_interval_seconds,
            request_timeout_s=config.controller_socket_timeout_ms / 1000,
            controlled_shutdown_max_retries=config.controlled_shutdown_max_retries,
            controlled_shutdown_retry_backoff_s=config.controlled_shutdown_retry_backoff_ms / 1000,
            zookeeper_connection_timeout_s=config.zookeeper_connection_timeout_ms / 1000,
            security=security or config.inter_broker_security,
        )
