"""Replication throttles without a broker: which replicas, which rate, when exceeded."""

from __future__ import annotations

import math

from gregor.broker.replication_quotas import ReplicationQuotas, throttled_partitions


def test_throttled_replicas_are_those_on_this_broker_or_all() -> None:
    assert throttled_partitions("*", 1) is None
    assert throttled_partitions("0:1, 1:2,2:1,bad,3:x", 1) == frozenset({0, 2})
    assert throttled_partitions("", 1) == frozenset()


def test_rates_come_from_the_brokers_own_config_over_the_default() -> None:
    quotas = ReplicationQuotas(broker_id=1, burst_s=1.0)
    assert math.isinf(quotas.leader.rate) and math.isinf(quotas.follower.rate)
    quotas.broker_config_changed("<default>", {"leader.replication.throttled.rate": "100"})
    quotas.broker_config_changed("2", {"leader.replication.throttled.rate": "5"})
    assert quotas.leader.rate == 100
    quotas.broker_config_changed("1", {"follower.replication.throttled.rate": "50"})
    assert (quotas.leader.rate, quotas.follower.rate) == (100, 50)
    quotas.broker_config_changed("<default>", {})
    assert math.isinf(quotas.leader.rate)


def test_a_throttled_replica_is_held_once_the_bytes_exceed_the_rate() -> None:
    quotas = ReplicationQuotas(broker_id=1, burst_s=1.0)
    quotas.topic_config_changed("t", {"leader.replication.throttled.replicas": "0:1"})
    assert quotas.leader_throttled("t") and not quotas.leader_throttled("u")
    # No rate: nothing is throttled even where the replicas are listed.
    assert not quotas.leader.is_throttled("t", 0)
    quotas.broker_config_changed("1", {"leader.replication.throttled.rate": "1000"})
    leader = quotas.leader
    assert leader.is_throttled("t", 0) and not leader.is_throttled("t", 1)
    assert not leader.exceeded()
    leader.record(1000)  # the burst (1 s worth)
    assert not leader.exceeded()
    leader.record(500)
    assert leader.exceeded()
    assert 0.4 < leader.throttle_s() <= 0.5
    quotas.topic_config_changed("t", {})
    assert not leader.is_throttled("t", 0) and not quotas.leader_throttled("t")
