"""A transactional id's state and the rules of every transition, as Kafka's
TransactionMetadata keeps them.

```
Empty ─AddPartitions─> Ongoing ─EndTxn(commit)─> PrepareCommit ─markers─> CompleteCommit
                        │  └─EndTxn(abort)─────> PrepareAbort ──markers──> CompleteAbort
                        └─InitProducerId, timeout: PrepareEpochFence (in memory) ─> PrepareAbort
Empty, Complete* ─InitProducerId─> Empty (the next epoch, or a new producer id)
Empty, Complete* ─AddPartitions─> Ongoing;  ─transactional.id.expiration.ms─> Dead (tombstone)
```

A change is made in two steps, as in Kafka: `prepare_*` checks the rule and returns the
`TxnTransit` to write to `__transaction_state` (setting `pending_state`, so a concurrent
request gets CONCURRENT_TRANSACTIONS); once the write is replicated, `complete_transition`
applies it. A failed write clears `pending_state` and changes nothing. The only state never
written is PrepareEpochFence: the in-memory step of a fenced abort.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from typing import Final

import attrs

TopicPartition = tuple[str, int]

NO_PRODUCER_ID: Final = -1
NO_PRODUCER_EPOCH: Final = -1
# Kafka's Short.MaxValue; an epoch of MAX_EPOCH - 1 or more is exhausted: the producer id
# must change.
MAX_EPOCH: Final = 32767


class TxnState(enum.IntEnum):
    """The states, numbered as TransactionLogValue's TransactionStatus."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def display(self) -> str:
        """Kafka's name (ListTransactions and DescribeTransactions answer with it)."""
        return _DISPLAY[self]

    @property
    def is_prepare(self) -> bool:
        return self in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)

    @property
    def is_complete(self) -> bool:
        return self in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)

    @property
    def is_expirable(self) -> bool:
        return self in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)


_DISPLAY: Final = {
    TxnState.EMPTY: "Empty",
    TxnState.ONGOING: "Ongoing",
    TxnState.PREPARE_COMMIT: "PrepareCommit",
    TxnState.PREPARE_ABORT: "PrepareAbort",
    TxnState.COMPLETE_COMMIT: "CompleteCommit",
    TxnState.COMPLETE_ABORT: "CompleteAbort",
    TxnState.DEAD: "Dead",
    TxnState.PREPARE_EPOCH_FENCE: "PrepareEpochFence",
}
STATE_BY_NAME: Final = {name: state for state, name in _DISPLAY.items()}

_IDLE: Final = frozenset({TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT})
# The states each state may be entered from.
VALID_PREVIOUS: Final[dict[TxnState, frozenset[TxnState]]] = {
    TxnState.EMPTY: _IDLE,
    TxnState.ONGOING: _IDLE | {TxnState.ONGOING},
    TxnState.PREPARE_COMMIT: frozenset({TxnState.ONGOING}),
    TxnState.PREPARE_ABORT: frozenset({TxnState.ONGOING, TxnState.PREPARE_EPOCH_FENCE}),
    TxnState.COMPLETE_COMMIT: frozenset({TxnState.PREPARE_COMMIT}),
    TxnState.COMPLETE_ABORT: frozenset({TxnState.PREPARE_ABORT}),
    TxnState.DEAD: _IDLE,
    TxnState.PREPARE_EPOCH_FENCE: frozenset({TxnState.ONGOING}),
}


class IllegalTransition(Exception):
    """A transition the rules forbid: a coordinator bug, answered as a server error."""


class ProducerFenced(Exception):
    """The producer's epoch is an old one: answered PRODUCER_FENCED."""


@attrs.frozen(slots=True)
class TxnTransit:
    """The state a transition leads to: what is written to the log, and then applied."""

    producer_id: int
    previous_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: frozenset[TopicPartition]
    start_ms: int
    update_ms: int


@attrs.define(slots=True, eq=False)
class TransactionMetadata:
    transactional_id: str
    producer_id: int
    previous_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: set[TopicPartition] = attrs.field(factory=set)
    start_ms: int = -1
    update_ms: int = -1
    pending_state: TxnState | None = None
    # A fence's PrepareAbort failed to be written: the epoch was bumped but never told to
    # anyone, so the next fence does not bump it again (Kafka's hasFailedEpochFence).
    failed_epoch_fence: bool = False

    @classmethod
    def from_transit(cls, transactional_id: str, transit: TxnTransit) -> TransactionMetadata:
        return cls(
            transactional_id,
            transit.producer_id,
            transit.previous_producer_id,
            transit.producer_epoch,
            transit.last_producer_epoch,
            transit.timeout_ms,
            transit.state,
            set(transit.partitions),
            transit.start_ms,
            transit.update_ms,
        )

    @property
    def is_epoch_exhausted(self) -> bool:
        return self.producer_epoch >= MAX_EPOCH - 1

    def _transit(self, state: TxnState, **changes: object) -> TxnTransit:
        if self.pending_state is not None:
            raise IllegalTransition(
                f"{self.transactional_id}: {self.pending_state.display} is pending"
            )
        if self.state not in VALID_PREVIOUS[state]:
            raise IllegalTransition(
                f"{self.transactional_id}: no transition from {self.state.display} to "
                f"{state.display}"
            )
        fields: dict[str, object] = {
            "producer_id": self.producer_id,
            "previous_producer_id": self.previous_producer_id,
            "producer_epoch": self.producer_epoch,
            "last_producer_epoch": self.last_producer_epoch,
            "timeout_ms": self.timeout_ms,
            "state": state,
            "partitions": frozenset(self.partitions),
            "start_ms": self.start_ms,
            "update_ms": self.update_ms,
        }
        fields.update(changes)
        self.pending_state = state
        return TxnTransit(**fields)  # type: ignore[arg-type]

    # -- the transitions -----------------------------------------------------------------

    def prepare_epoch_bump(
        self, timeout_ms: int, now_ms: int, expected_epoch: int | None = None
    ) -> TxnTransit:
        """InitProducerId on an idle id: Empty, at the next epoch (the first is 0). KIP-360:
        a producer that says which epoch it has (`expected_epoch`) gets the next one if it
        has the current one, and the current one again if it has the last one (a retry of a
        bump it did not hear of); a new producer (no expected epoch) leaves no last epoch,
        so the one it replaced cannot come back that way. Else PRODUCER_FENCED."""
        bumped = self.producer_epoch + 1  # NO_PRODUCER_EPOCH + 1 is the first epoch, 0
        if expected_epoch is None:
            epoch, last = bumped, NO_PRODUCER_EPOCH
        elif self.producer_epoch == NO_PRODUCER_EPOCH or expected_epoch == self.producer_epoch:
            epoch, last = bumped, self.producer_epoch
        elif expected_epoch == self.last_producer_epoch:
            epoch, last = self.producer_epoch, self.last_producer_epoch
        else:
            raise ProducerFenced(
                f"{self.transactional_id}: epoch {expected_epoch} is neither the current "
                f"{self.producer_epoch} nor the last {self.last_producer_epoch}"
            )
        return self._transit(
            TxnState.EMPTY,
            producer_epoch=epoch,
            last_producer_epoch=last,
            timeout_ms=timeout_ms,
            partitions=frozenset(),
            start_ms=-1,
            update_ms=now_ms,
        )

    def prepare_producer_id_rotation(
        self, producer_id: int, timeout_ms: int, now_ms: int, record_last_epoch: bool
    ) -> TxnTransit:
        """InitProducerId when the epoch is exhausted: a new producer id at epoch 0; the old
        epoch is kept as the last one only for the producer that had it (its retry)."""
        return self._transit(
            TxnState.EMPTY,
            producer_id=producer_id,
            previous_producer_id=self.producer_id,
            producer_epoch=0,
            last_producer_epoch=self.producer_epoch if record_last_epoch else NO_PRODUCER_EPOCH,
            timeout_ms=timeout_ms,
            partitions=frozenset(),
            start_ms=-1,
            update_ms=now_ms,
        )

    def prepare_add_partitions(self, added: Iterable[TopicPartition], now_ms: int) -> TxnTransit:
        """AddPartitionsToTxn / AddOffsetsToTxn: Ongoing; the first one starts the clock."""
        start = now_ms if self.state in _IDLE else self.start_ms
        return self._transit(
            TxnState.ONGOING,
            partitions=frozenset(self.partitions) | frozenset(added),
            start_ms=start,
            update_ms=now_ms,
        )

    def prepare_end(self, commit: bool, now_ms: int) -> TxnTransit:
        """EndTxn (or an abort the coordinator decides): PrepareCommit or PrepareAbort."""
        state = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        return self._transit(state, update_ms=now_ms)

    def prepare_complete(self, now_ms: int) -> TxnTransit:
        """Every marker written: CompleteCommit or CompleteAbort, without partitions."""
        state = (
            TxnState.COMPLETE_COMMIT
            if self.state is TxnState.PREPARE_COMMIT
            else TxnState.COMPLETE_ABORT
        )
        self.failed_epoch_fence = False  # the prepare record (with the epoch) was written
        return self._transit(state, partitions=frozenset(), update_ms=now_ms)

    def fence_epoch(self) -> None:
        """The in-memory step before an abort the producer did not ask for (a new
        InitProducerId, a timeout): the epoch goes up, so the old producer is fenced by the
        markers and by the coordinator. Applied at once; PrepareAbort is written next. As
        in Kafka the last epoch stays what it was: the fenced epoch never becomes one a
        producer may come back with (KIP-360)."""
        bump = not self.failed_epoch_fence
        if bump and self.producer_epoch >= MAX_EPOCH:
            raise IllegalTransition(f"{self.transactional_id}: epoch {MAX_EPOCH} cannot be fenced")
        transit = self._transit(TxnState.PREPARE_EPOCH_FENCE)
        self.pending_state = None
        if bump:
            self.producer_epoch += 1
        self.state = transit.state

    def prepare_dead(self, now_ms: int) -> TxnTransit:
        """transactional.id.expiration.ms passed: the id's tombstone."""
        return self._transit(TxnState.DEAD, partitions=frozenset(), update_ms=now_ms)

    def complete_transition(self, transit: TxnTransit) -> None:
        """Apply a transition whose write was replicated."""
        if self.pending_state is not transit.state:
            raise IllegalTransition(
                f"{self.transactional_id}: completing {transit.state.display}, but "
                f"{self.pending_state.display if self.pending_state else 'nothing'} is pending"
            )
        self.producer_id = transit.producer_id
        self.previous_producer_id = transit.previous_producer_id
        self.producer_epoch = transit.producer_epoch
        self.last_producer_epoch = transit.last_producer_epoch
        self.timeout_ms = transit.timeout_ms
        self.state = transit.state
        self.partitions = set(transit.partitions)
        self.start_ms = transit.start_ms
        self.update_ms = transit.update_ms
        self.pending_state = None

    def abandon_transition(self) -> None:
        """The write failed: nothing changes, but a fenced epoch stays fenced (the abort is
        tried again by the next timeout scan or InitProducerId, without another bump)."""
        self.pending_state = None
        if self.state is TxnState.PREPARE_EPOCH_FENCE:
            self.state = TxnState.ONGOING
            self.failed_epoch_fence = True
