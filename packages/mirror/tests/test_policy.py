"""Replication policies: MM2's names for remote and internal topics, and loop detection."""

from __future__ import annotations

import pytest

from gregor.mirror import DefaultReplicationPolicy, IdentityReplicationPolicy
from gregor.mirror.policy import is_cycle, policy_from_config


def test_default_policy_names() -> None:
    policy = DefaultReplicationPolicy()
    assert policy.format_remote_topic("A", "orders") == "A.orders"
    assert policy.topic_source("A.orders") == "A"
    assert policy.upstream_topic("B.A.orders") == "A.orders"
    assert policy.original_topic("B.A.orders") == "orders"
    assert policy.topic_source("orders") is None
    assert policy.topic_source("orders.") is None  # Java's split drops the empty tail
    assert policy.offset_syncs_topic("B") == "mm2-offset-syncs.B.internal"
    assert policy.checkpoints_topic("A") == "A.checkpoints.internal"
    assert policy.heartbeats_topic() == "heartbeats"
    assert policy.is_heartbeats_topic("B.A.heartbeats")
    assert not policy.is_heartbeats_topic("A.orders")


def test_custom_separator() -> None:
    policy = DefaultReplicationPolicy("__")
    assert policy.format_remote_topic("A", "orders") == "A__orders"
    assert policy.topic_source("A__x.y") == "A"
    assert policy.checkpoints_topic("A") == "A__checkpoints__internal"
    plain = DefaultReplicationPolicy("__", internal_separator=False)
    assert plain.offset_syncs_topic("B") == "mm2-offset-syncs.B.internal"


@pytest.mark.parametrize(
    "topic",
    [
        "__consumer_offsets",
        "__transaction_state",
        "mm2-offset-syncs.B.internal",
        "A.checkpoints.internal",
        "connect-offsets-internal",
        ".hidden",
    ],
)
def test_internal_topics(topic: str) -> None:
    assert DefaultReplicationPolicy().is_internal_topic(topic)


def test_loops_are_detected() -> None:
    policy = DefaultReplicationPolicy()
    assert is_cycle(policy, "B.orders", "B")
    assert is_cycle(policy, "A.B.orders", "B")
    assert not is_cycle(policy, "A.orders", "B")
    assert not is_cycle(policy, "orders", "B")


def test_identity_policy() -> None:
    policy = IdentityReplicationPolicy()
    assert policy.format_remote_topic("A", "orders") == "orders"
    assert policy.format_remote_topic("A", "heartbeats") == "A.heartbeats"
    assert policy.topic_source("orders") is None
    assert not is_cycle(policy, "orders", "B")
    assert IdentityReplicationPolicy(source_alias="A").topic_source("orders") == "A"


def test_policy_by_class_name() -> None:
    name = "org.apache.kafka.connect.mirror.IdentityReplicationPolicy"
    assert isinstance(policy_from_config(name), IdentityReplicationPolicy)
    assert type(policy_from_config("DefaultReplicationPolicy")) is DefaultReplicationPolicy
    with pytest.raises(ValueError, match="not a replication policy"):
        policy_from_config("com.example.Mine")


class RegionPolicy(DefaultReplicationPolicy):
    """A policy of one's own: remote topics named `<topic>@<source>`."""

    def format_remote_topic(self, source_alias: str, topic: str) -> str:
        return f"{topic}@{source_alias}"

    def topic_source(self, topic: str) -> str | None:
        return topic.rpartition("@")[2] if "@" in topic else None

    def upstream_topic(self, topic: str) -> str | None:
        return topic.rpartition("@")[0] if "@" in topic else None


def test_a_python_policy_of_ones_own() -> None:
    name = f"{__name__}:RegionPolicy"
    policy = policy_from_config(name, separator="_")
    assert isinstance(policy, RegionPolicy) and policy.separator == "_"
    assert policy.format_remote_topic("A", "orders") == "orders@A"
    assert is_cycle(policy, "orders@B@A", "B") and not is_cycle(policy, "orders@A", "B")
    with pytest.raises(ValueError, match=r"cannot be loaded \(ModuleNotFoundError"):
        policy_from_config("no_such_module:Policy")
    with pytest.raises(ValueError, match=r"cannot be loaded \(AttributeError"):
        policy_from_config(f"{__name__}:NoSuchPolicy")
    with pytest.raises(ValueError, match="is not a subclass of"):
        policy_from_config(f"{__name__}:test_a_python_policy_of_ones_own")
