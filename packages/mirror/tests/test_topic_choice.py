"""Which source topics a flow mirrors: MM2's rule, and no topic whose records the enabled
flows would carry back into it (the loop MM2 falls into with IdentityReplicationPolicy)."""

from __future__ import annotations

from gregor.mirror.config import FlowConfig, MirrorConfig
from gregor.mirror.topics import comes_back, passes, should_replicate

IDENTITY = {"replication.policy.class": "IdentityReplicationPolicy"}


def flows(clusters: str = "A, B", **settings: str) -> dict[str, FlowConfig]:
    props = {"clusters": clusters, **settings}
    props |= {f"{alias.strip()}.bootstrap.servers": "host:1" for alias in clusters.split(",")}
    return {f.name: f for f in MirrorConfig.from_properties(props).flows}


def test_the_default_policy_mirrors_active_active_without_a_loop() -> None:
    both = flows(**{"A->B.enabled": "true", "B->A.enabled": "true"})
    a_to_b, b_to_a = both["A->B"], both["B->A"]
    assert should_replicate(a_to_b, "orders") and should_replicate(b_to_a, "orders")
    # The copies come back no further: their names say where they came from.
    assert not should_replicate(b_to_a, "A.orders")
    assert not should_replicate(a_to_b, "B.orders")
    assert not comes_back(a_to_b, "orders")


def test_identity_active_active_mirrors_a_shared_topic_in_neither_direction() -> None:
    both = flows(**{"A->B.enabled": "true", "B->A.enabled": "true"}, **IDENTITY)
    for name in ("A->B", "B->A"):
        assert passes(both[name], "orders")  # MM2 would mirror it both ways: a loop
        assert comes_back(both[name], "orders")
        assert not should_replicate(both[name], "orders")
    # Heartbeats keep the default naming under the identity policy: no loop.
    assert should_replicate(both["A->B"], "heartbeats")


def test_identity_with_disjoint_topics_mirrors_each_its_way() -> None:
    both = flows(
        **{"A->B.enabled": "true", "A->B.topics": "orders.*"},
        **{"B->A.enabled": "true", "B->A.topics": "payments.*"},
        **IDENTITY,
    )
    assert should_replicate(both["A->B"], "orders.eu")
    assert should_replicate(both["B->A"], "payments.eu")
    assert not should_replicate(both["A->B"], "payments.eu")  # the filter, not a loop
    assert not comes_back(both["A->B"], "orders.eu")


def test_identity_one_way_mirrors_everything_it_is_told() -> None:
    one_way = flows(**{"A->B.enabled": "true"}, **IDENTITY)
    assert should_replicate(one_way["A->B"], "orders")


def test_a_longer_cycle_is_found_too() -> None:
    ring = flows(
        "A, B, C",
        **{"A->B.enabled": "true", "B->C.enabled": "true", "C->A.enabled": "true"},
        **IDENTITY,
    )
    assert all(comes_back(f, "orders") for f in ring.values() if f.enabled)
    # Cut the ring for one topic, and it flows A->B->C without coming back.
    cut = flows(
        "A, B, C",
        **{"A->B.enabled": "true", "B->C.enabled": "true", "C->A.enabled": "true"},
        **{"C->A.topics.exclude": "orders"},
        **IDENTITY,
    )
    assert should_replicate(cut["A->B"], "orders") and should_replicate(cut["B->C"], "orders")
    assert not should_replicate(cut["C->A"], "orders")
