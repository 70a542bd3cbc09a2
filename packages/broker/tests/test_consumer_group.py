"""KIP-848 bookkeeping: a member's steps towards its target (revoke first, take only what
is free), and the server-side assignors (balanced, sticky, ranges)."""

from __future__ import annotations

import uuid

from gregor.broker.coordinator.group.consumer_group import (
    ConsumerGroup,
    ConsumerMember,
    MemberState,
    as_assignment,
    next_member_state,
)
from gregor.broker.coordinator.group.server_assignors import RangeAssignor, UniformAssignor

T = uuid.UUID(int=1)
U = uuid.UUID(int=2)


def member(member_id: str, epoch: int, *partitions: int) -> ConsumerMember:
    return ConsumerMember(
        member_id, "client", "/127.0.0.1", 30000, member_epoch=epoch,
        assigned=as_assignment([(T, partitions)]) if partitions else {},
    )  # fmt: skip


def parts(*partitions: int) -> dict[uuid.UUID, frozenset[int]]:
    return as_assignment([(T, partitions)])


def test_a_member_revokes_first_and_keeps_its_epoch() -> None:
    before = member("a", 3, 0, 1, 2)
    step = next_member_state(before, parts(0, 3), 4, lambda tp: None, owned=parts(0, 1, 2))
    assert step.state is MemberState.UNREVOKED_PARTITIONS
    assert (step.member_epoch, step.assigned, step.pending_revocation) == (3, parts(0), parts(1, 2))
    # Still listing a revoked partition: nothing moves.
    assert next_member_state(step, parts(0, 3), 4, lambda tp: None, owned=parts(0, 1)) is step
    # Once it no longer owns them it gets the new epoch and what is free.
    done = next_member_state(step, parts(0, 3), 4, lambda tp: None, owned=parts(0))
    assert (done.state, done.member_epoch, done.assigned) == (MemberState.STABLE, 4, parts(0, 3))
    assert done.previous_member_epoch == 3


def test_a_partition_another_member_owns_is_given_once_released() -> None:
    before = member("b", 3, 4)
    owners = {(T, 5): "a"}
    step = next_member_state(before, parts(4, 5), 4, owners.get, owned=None)
    assert (step.state, step.member_epoch, step.assigned) == (
        MemberState.UNRELEASED_PARTITIONS, 4, parts(4)
    )  # fmt: skip
    owners.clear()
    done = next_member_state(step, parts(4, 5), 4, owners.get, owned=None)
    assert (done.state, done.assigned) == (MemberState.STABLE, parts(4, 5))


def test_what_the_member_gave_up_already_needs_no_revocation() -> None:
    before = member("a", 3, 0, 1)
    step = next_member_state(before, parts(0), 4, lambda tp: None, owned=parts(0))
    assert (step.state, step.member_epoch, step.assigned) == (MemberState.STABLE, 4, parts(0))


def test_the_group_knows_who_owns_what() -> None:
    group = ConsumerGroup()
    group.put(member("a", 1, 0, 1))
    group.put(member("b", 1, 2))
    assert [group.owner_of((T, p)) for p in range(4)] == ["a", "a", "b", None]
    group.put(member("a", 1, 1))
    assert group.owner_of((T, 0)) is None
    epoch = group.group_epoch
    group.remove("b")
    assert (group.owner_of((T, 2)), group.group_epoch) == (None, epoch + 1)


def test_uniform_is_balanced_and_sticky() -> None:
    topics = {"t": (T, 10), "u": (U, 2)}
    everyone = frozenset({"t", "u"})
    first = UniformAssignor().assign(dict.fromkeys("abc", everyone), topics, {})
    sizes = sorted(sum(map(len, a.values())) for a in first.values())
    assert sizes == [4, 4, 4]
    second = UniformAssignor().assign(dict.fromkeys("abcd", everyone), topics, first)
    assert sorted(sum(map(len, a.values())) for a in second.values()) == [3, 3, 3, 3]
    for name in "abc":  # each old member only gave partitions away
        for topic_id, partitions in second[name].items():
            assert partitions <= first[name][topic_id]
    owned = [(t, p) for a in second.values() for t, ps in a.items() for p in ps]
    assert len(owned) == len(set(owned)) == 12


def test_uniform_gives_each_topic_only_to_its_subscribers() -> None:
    topics = {"t": (T, 4), "u": (U, 4)}
    out = UniformAssignor().assign({"a": frozenset({"t"}), "b": frozenset({"u"})}, topics, {})
    assert out == {"a": {T: frozenset(range(4))}, "b": {U: frozenset(range(4))}}


def test_range_gives_contiguous_ranges_of_each_topic() -> None:
    topics = {"t": (T, 5), "u": (U, 5)}
    out = RangeAssignor().assign(dict.fromkeys("ab", frozenset({"t", "u"})), topics, {})
    assert out["a"] == {T: frozenset({0, 1, 2}), U: frozenset({0, 1, 2})}
    assert out["b"] == {T: frozenset({3, 4}), U: frozenset({3, 4})}
