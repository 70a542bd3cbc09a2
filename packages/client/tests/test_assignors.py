"""The four assignors, each on its own: complete, never a partition twice, only to members
subscribed to it, deterministic, balanced, and (for the sticky ones) sticky across
rebalances. Property tests draw groups and topics; examples pin Kafka's documented results."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Mapping

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gregor.client.assignors import (
    BUILT_IN,
    Assignment,
    Assignor,
    CooperativeStickyAssignor,
    MemberSubscription,
    RangeAssignor,
    RoundRobinAssignor,
    StickyAssignor,
    TopicLayout,
    assignor_for,
)
from gregor.client.types import TopicPartition as TP

NO_RACKS: frozenset[str] = frozenset()


def layout(**counts: int) -> dict[str, list[frozenset[str]]]:
    return {topic: [NO_RACKS] * n for topic, n in counts.items()}


def members(*specs: tuple[str, tuple[str, ...]]) -> dict[str, MemberSubscription]:
    return {m: MemberSubscription(m, topics) for m, topics in specs}


def all_partitions(topics: TopicLayout, group: Mapping[str, MemberSubscription]) -> set[TP]:
    wanted = {t for m in group.values() for t in m.topics}
    return {TP(t, p) for t in wanted if t in topics for p in range(len(topics[t]))}


def check_valid(
    topics: TopicLayout, group: Mapping[str, MemberSubscription], result: Assignment
) -> None:
    """Every member present; partitions exist, go to subscribers, and at most once."""
    assert set(result) == set(group)
    counts = Counter(tp for partitions in result.values() for tp in partitions)
    assert all(n == 1 for n in counts.values()), counts.most_common(3)
    for member, partitions in result.items():
        assert partitions == sorted(partitions)
        for tp in partitions:
            assert tp.topic in group[member].topics
            assert 0 <= tp.partition < len(topics[tp.topic])


@st.composite
def groups(
    draw: st.DrawFn, equal: bool | None = None
) -> tuple[dict[str, list[frozenset[str]]], dict[str, MemberSubscription]]:
    topic_names = [f"t{i}" for i in range(draw(st.integers(1, 4)))]
    topics = {t: [NO_RACKS] * draw(st.integers(1, 9)) for t in topic_names}
    count = draw(st.integers(1, 7))
    ids = draw(
        st.lists(
            st.text("abcdef", min_size=1, max_size=4), min_size=count, max_size=count, unique=True
        )
    )
    shared = tuple(draw(st.lists(st.sampled_from(topic_names), min_size=1, unique=True)))
    group = {}
    for member_id in ids:
        if equal is None:
            mine = tuple(draw(st.lists(st.sampled_from(topic_names), min_size=1, unique=True)))
        else:
            mine = shared
        instance = draw(st.none() | st.sampled_from(["i1", "i2", "i3"]))
        if instance in {m.group_instance_id for m in group.values()}:
            instance = None
        group[member_id] = MemberSubscription(member_id, mine, group_instance_id=instance)
    return topics, group


ALL = [RangeAssignor, RoundRobinAssignor, StickyAssignor, CooperativeStickyAssignor]


@pytest.mark.parametrize("cls", ALL, ids=lambda c: c.name)
@settings(max_examples=150, deadline=None)
@given(case=groups())
def test_complete_valid_and_deterministic(cls: type[Assignor], case: tuple) -> None:
    topics, group = case
    result = cls().assign(topics, group)
    check_valid(topics, group, result)
    assigned = {tp for partitions in result.values() for tp in partitions}
    assert assigned == all_partitions(topics, group)  # nothing owned yet: all assigned
    shuffled = list(group.items())
    random.Random(7).shuffle(shuffled)
    assert cls().assign(dict(reversed(topics.items())), dict(shuffled)) == result


def spread(result: Assignment) -> int:
    sizes = [len(p) for p in result.values()]
    return max(sizes) - min(sizes)


@pytest.mark.parametrize(
    "cls", [RoundRobinAssignor, StickyAssignor, CooperativeStickyAssignor], ids=lambda c: c.name
)
@settings(max_examples=150, deadline=None)
@given(case=groups(equal=True))
def test_equal_subscriptions_are_balanced_within_one(cls: type[Assignor], case: tuple) -> None:
    topics, group = case
    assert spread(cls().assign(topics, group)) <= 1


@settings(max_examples=150, deadline=None)
@given(case=groups())
def test_range_balances_each_topic(case: tuple) -> None:
    topics, group = case
    result = RangeAssignor().assign(topics, group)
    for topic in topics:
        subscribers = [m for m in group if topic in group[m].topics]
        sizes = [sum(tp.topic == topic for tp in result[m]) for m in subscribers]
        if sizes:
            assert max(sizes) - min(sizes) <= 1


def movable(
    topics: TopicLayout, group: Mapping[str, MemberSubscription], result: Assignment
) -> list[tuple[TP, str, str]]:
    """Partitions that could move to an eligible member holding at least two fewer."""
    return [
        (tp, owner, other)
        for owner, partitions in result.items()
        for tp in partitions
        for other in group
        if tp.topic in group[other].topics and len(result[owner]) > len(result[other]) + 1
    ]


@pytest.mark.parametrize("cls", [StickyAssignor, CooperativeStickyAssignor], ids=lambda c: c.name)
@settings(max_examples=150, deadline=None)
@given(case=groups(equal=False))
def test_sticky_general_case_leaves_no_improving_move(cls: type[Assignor], case: tuple) -> None:
    topics, group = case
    result = cls().assign(topics, group)
    check_valid(topics, group, result)
    assert movable(topics, group, result) == []


def with_owned(
    group: Mapping[str, MemberSubscription],
    result: Assignment,
    generation: int,
    assignor: type[Assignor],
) -> dict[str, MemberSubscription]:
    """The next round's subscriptions, carrying what each member owns as its assignor does."""
    out = {}
    for member, sub in group.items():
        owned = tuple(result.get(member, []))
        if assignor is StickyAssignor:
            local = StickyAssignor()
            local.on_assignment(owned, generation)
            sub = MemberSubscription(
                member,
                sub.topics,
                user_data=local.subscription_user_data(sub.topics),
                group_instance_id=sub.group_instance_id,
            )
        else:
            sub = MemberSubscription(
                member,
                sub.topics,
                owned_partitions=owned,
                generation_id=generation,
                group_instance_id=sub.group_instance_id,
            )
        out[member] = sub
    return out


def rebalance(
    assignor: type[Assignor], topics: TopicLayout, group: Mapping[str, MemberSubscription]
) -> Assignment:
    """One rebalance, or for cooperative-sticky the two rounds KIP-429 takes."""
    result = assignor().assign(topics, group)
    if assignor is CooperativeStickyAssignor:
        # Members revoke what they were not given back, then everyone rejoins.
        kept = {
            m: [tp for tp in sub.owned_partitions if tp in result[m]] for m, sub in group.items()
        }
        second = {
            m: MemberSubscription(
                m,
                sub.topics,
                owned_partitions=tuple(result[m]),
                generation_id=sub.generation_id + 1,
            )
            for m, sub in group.items()
        }
        for member in group:
            assert set(kept[member]) <= set(result[member])  # owned and kept: not moved
        result = assignor().assign(topics, second)
    return result


@pytest.mark.parametrize("cls", [StickyAssignor, CooperativeStickyAssignor], ids=lambda c: c.name)
@settings(max_examples=100, deadline=None)
@given(case=groups(equal=True), leaving=st.integers(0, 6), data=st.data())
def test_sticky_members_keep_their_partitions_when_others_leave_or_join(
    cls: type[Assignor], case: tuple, leaving: int, data: st.DataObject
) -> None:
    topics, group = case
    first = cls().assign(topics, group)
    owning = with_owned(group, first, generation=1, assignor=cls)
    # A member leaves: everyone else keeps everything they had.
    if len(group) > 1:
        gone = sorted(group)[leaving % len(group)]
        rest = {m: s for m, s in owning.items() if m != gone}
        after = rebalance(cls, topics, rest)
        check_valid(topics, rest, after)
        assert {tp for p in after.values() for tp in p} == all_partitions(topics, rest)
        for member in rest:
            assert set(first[member]) <= set(after[member])
        assert spread(after) <= 1
    # A member joins: old members lose only what the new quota takes from them.
    topics_of = next(iter(group.values())).topics
    joined = {**owning, "zzzz": MemberSubscription("zzzz", topics_of)}
    after = rebalance(cls, topics, joined)
    check_valid(topics, joined, after)
    assert spread(after) <= 1
    quota = max(len(p) for p in after.values())
    for member in group:
        kept = set(first[member]) & set(after[member])
        assert len(kept) >= min(len(first[member]), quota - 1)


def test_cooperative_sticky_withholds_partitions_that_change_owner() -> None:
    topics = layout(t=4)
    group = {
        "a": MemberSubscription(
            "a",
            ("t",),
            owned_partitions=(TP("t", 0), TP("t", 1), TP("t", 2), TP("t", 3)),
            generation_id=3,
        ),
        "b": MemberSubscription("b", ("t",), generation_id=3),
    }
    first = CooperativeStickyAssignor().assign(topics, group)
    # a keeps two, b gets nothing yet: the two moving partitions are revoked by a first.
    assert first == {"a": [TP("t", 0), TP("t", 1)], "b": []}
    second = CooperativeStickyAssignor().assign(
        topics,
        {
            "a": MemberSubscription(
                "a", ("t",), owned_partitions=(TP("t", 0), TP("t", 1)), generation_id=4
            ),
            "b": MemberSubscription("b", ("t",), generation_id=4),
        },
    )
    assert second == {"a": [TP("t", 0), TP("t", 1)], "b": [TP("t", 2), TP("t", 3)]}


def test_claims_from_a_newer_generation_win_and_same_generation_claims_cancel() -> None:
    topics = layout(t=2)
    newer = {
        "a": MemberSubscription("a", ("t",), owned_partitions=(TP("t", 0),), generation_id=2),
        "b": MemberSubscription("b", ("t",), owned_partitions=(TP("t", 0),), generation_id=5),
    }
    assert CooperativeStickyAssignor().assign(topics, newer)["b"] == [TP("t", 0)]
    same = {
        "a": MemberSubscription("a", ("t",), owned_partitions=(TP("t", 0),), generation_id=5),
        "b": MemberSubscription("b", ("t",), owned_partitions=(TP("t", 0),), generation_id=5),
    }
    result = CooperativeStickyAssignor().assign(topics, same)
    assert TP("t", 0) not in result["a"] + result["b"]  # contested: assigned next round


def test_range_examples_from_kafka() -> None:
    # Two members, two topics of three partitions: the first member gets two of each.
    result = RangeAssignor().assign(
        layout(t0=3, t1=3), members(("C0", ("t0", "t1")), ("C1", ("t0", "t1")))
    )
    assert result == {
        "C0": [TP("t0", 0), TP("t0", 1), TP("t1", 0), TP("t1", 1)],
        "C1": [TP("t0", 2), TP("t1", 2)],
    }
    three = RangeAssignor().assign(layout(t=12), members(*[(f"m{i}", ("t",)) for i in range(3)]))
    assert [len(p) for p in three.values()] == [4, 4, 4]


def test_roundrobin_example_from_kafka() -> None:
    # C0 subscribes t0; C1 t0, t1; C2 t0, t1, t2 (one, two and three partitions).
    result = RoundRobinAssignor().assign(
        layout(t0=1, t1=2, t2=3),
        members(("C0", ("t0",)), ("C1", ("t0", "t1")), ("C2", ("t0", "t1", "t2"))),
    )
    assert result == {
        "C0": [TP("t0", 0)],
        "C1": [TP("t1", 0)],
        "C2": [TP("t1", 1), TP("t2", 0), TP("t2", 1), TP("t2", 2)],
    }


def test_static_members_come_first_by_instance_id() -> None:
    group = {
        "a-new": MemberSubscription("a-new", ("t",), group_instance_id="z"),
        "b": MemberSubscription("b", ("t",), group_instance_id="y"),
        "c": MemberSubscription("c", ("t",)),
    }
    result = RangeAssignor().assign(layout(t=5), group)
    assert result == {
        "b": [TP("t", 0), TP("t", 1)],
        "a-new": [TP("t", 2), TP("t", 3)],
        "c": [TP("t", 4)],
    }


def test_rack_aware_range_and_sticky_prefer_local_replicas() -> None:
    racks = [frozenset({"r0"}), frozenset({"r1"}), frozenset({"r0"}), frozenset({"r1"})]
    topics = {"t": racks}
    group = {
        "a": MemberSubscription("a", ("t",), rack_id="r1"),
        "b": MemberSubscription("b", ("t",), rack_id="r0"),
    }
    expected = {"a": [TP("t", 1), TP("t", 3)], "b": [TP("t", 0), TP("t", 2)]}
    assert RangeAssignor().assign(topics, group) == expected
    assert StickyAssignor().assign(topics, group) == expected
    # Without racks on members, plain ranges.
    plain = {m: MemberSubscription(m, ("t",)) for m in "ab"}
    assert RangeAssignor().assign(topics, plain)["a"] == [TP("t", 0), TP("t", 1)]


def test_unknown_topics_and_more_members_than_partitions() -> None:
    group = members(("a", ("t", "missing")), ("b", ("t",)), ("c", ("t",)))
    for cls in ALL:
        result = cls().assign(layout(t=2), group)
        check_valid(layout(t=2), group, result)
        assert sorted(len(p) for p in result.values()) == [0, 1, 1]
        assert cls().assign(layout(t=2), {}) == {}


def test_sticky_user_data_round_trip_and_lookup() -> None:
    sticky = StickyAssignor()
    assert sticky.subscription_user_data(["t"]) is None  # never assigned yet
    sticky.on_assignment([TP("t", 1), TP("u", 0)], generation=7)
    data = sticky.subscription_user_data(["t"])
    member = MemberSubscription("m", ("t", "u"), user_data=data)
    assert sticky.claim(member) == ([TP("t", 1), TP("u", 0)], 7)
    cooperative = CooperativeStickyAssignor()
    cooperative.on_assignment([], generation=9)
    legacy = MemberSubscription("m", ("t",), user_data=cooperative.subscription_user_data(["t"]))
    assert cooperative.claim(legacy) == ([], 9)
    assert set(BUILT_IN) == {"range", "roundrobin", "sticky", "cooperative-sticky"}
    assert isinstance(assignor_for("cooperative-sticky"), CooperativeStickyAssignor)
    assert assignor_for(RangeAssignor).name == "range"
    with pytest.raises(TypeError, match="not an assignor"):
        assignor_for(3)
