"""The states of a classic group and the transitions between them.

- Empty: no members (a group only committing offsets, or one whose members all left). A
  JoinGroup starts a rebalance; the group dies when its last offsets expire or are deleted.
- PreparingRebalance: members are (re)joining; JoinGroups are parked until every known member
  has rejoined or the rebalance timeout passes. Heartbeats answer REBALANCE_IN_PROGRESS.
- CompletingRebalance: the new generation exists; the leader's SyncGroup with the assignment
  is awaited and the other members' SyncGroups are parked. Offset commits answer
  REBALANCE_IN_PROGRESS.
- Stable: members heartbeat and commit; a leader's JoinGroup, a follower's with new metadata,
  a LeaveGroup or a missed session timeout start a rebalance.
- Dead: the group is being removed (deleted, expired, or its partition moved away).
"""

from __future__ import annotations

import enum
from typing import Final


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"

    def __str__(self) -> str:
        return self.value


VALID_PREVIOUS: Final[dict[GroupState, frozenset[GroupState]]] = {
    GroupState.PREPARING_REBALANCE: frozenset(
        {GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY}
    ),
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.STABLE: frozenset({GroupState.COMPLETING_REBALANCE}),
    GroupState.DEAD: frozenset(GroupState),
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE}),
}
