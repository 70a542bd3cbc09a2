"""Partition leader election: who leads, what the ISR becomes, who must be told.

Four strategies, as in Kafka:

- offline: the first assigned replica that is alive and in the ISR; with unclean election
  enabled and no such replica, the first live replica at all (the ISR becomes just it);
- reassign: the first target replica that is alive and in the ISR;
- preferred: the first assigned replica, only if it is alive and in the ISR;
- controlled shutdown: the first assigned replica that is alive, in the ISR and not
  shutting down; the shutting-down brokers leave the ISR.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Sequence

import attrs

from gregor.broker.controller.context import ControllerContext
from gregor.broker.zk.znodes import LeaderAndIsr, TopicPartition


class Strategy(enum.Enum):
    OFFLINE = "offline"
    OFFLINE_UNCLEAN = "offline, unclean allowed"
    REASSIGN = "reassign"
    PREFERRED = "preferred replica"
    CONTROLLED_SHUTDOWN = "controlled shutdown"


@attrs.frozen
class ElectionResult:
    tp: TopicPartition
    leader_and_isr: LeaderAndIsr | None  # None: no eligible leader
    recipients: tuple[int, ...]  # the replicas to send LeaderAndIsr to
    unclean: bool = False


def offline_leader(
    assignment: Sequence[int], isr: Collection[int], live: Collection[int], unclean: bool
) -> tuple[int | None, bool]:
    """(leader, whether the choice was unclean)."""
    for replica in assignment:
        if replica in live and replica in isr:
            return replica, False
    if unclean:
        for replica in assignment:
            if replica in live:
                return replica, True
    return None, False


def reassign_leader(
    targets: Sequence[int], isr: Collection[int], live: Collection[int]
) -> int | None:
    return next((r for r in targets if r in live and r in isr), None)


def preferred_leader(
    assignment: Sequence[int], isr: Collection[int], live: Collection[int]
) -> int | None:
    if assignment and assignment[0] in live and assignment[0] in isr:
        return assignment[0]
    return None


def controlled_shutdown_leader(
    assignment: Sequence[int],
    isr: Collection[int],
    live: Collection[int],
    shutting_down: Collection[int],
) -> int | None:
    return next((r for r in assignment if r in live and r in isr and r not in shutting_down), None)


def elect(
    context: ControllerContext,
    tp: TopicPartition,
    current: LeaderAndIsr,
    strategy: Strategy,
    unclean_allowed: bool = False,
) -> ElectionResult:
    """The new state for `tp` (leader epoch bumped) under `strategy`, from `current`."""
    epoch = context.epoch
    assignment = context.replicas(tp)
    if strategy in (Strategy.OFFLINE, Strategy.OFFLINE_UNCLEAN):
        live = [r for r in assignment if context.is_replica_online(r, tp)]
        leader, unclean = offline_leader(
            assignment, current.isr, live, unclean_allowed or strategy == Strategy.OFFLINE_UNCLEAN
        )
        if leader is None:
            return ElectionResult(tp, None, tuple(live))
        if leader in current.isr:
            isr = [r for r in current.isr if context.is_replica_online(r, tp)]
        else:
            isr = [leader]
        return ElectionResult(
            tp, current.new_leader_and_isr(leader, isr, epoch), tuple(live), unclean
        )
    if strategy == Strategy.REASSIGN:
        targets = context.assignment(tp).target_replicas
        live = [r for r in targets if context.is_replica_online(r, tp)]
        leader = reassign_leader(targets, current.isr, live)
        state = None if leader is None else current.new_leader_and_isr(leader, current.isr, epoch)
        return ElectionResult(tp, state, targets)
    if strategy == Strategy.PREFERRED:
        live = [r for r in assignment if context.is_replica_online(r, tp)]
        leader = preferred_leader(assignment, current.isr, live)
        state = None if leader is None else current.new_leader_and_isr(leader, current.isr, epoch)
        return ElectionResult(tp, state, assignment)
    # Controlled shutdown.
    shutting_down = context.shutting_down
    live = [r for r in assignment if context.is_replica_online(r, tp, include_shutting_down=True)]
    leader = controlled_shutdown_leader(assignment, current.isr, live, shutting_down)
    isr = [r for r in current.isr if r not in shutting_down]
    state = None if leader is None else current.new_leader_and_isr(leader, isr, epoch)
    return ElectionResult(tp, state, tuple(live))
