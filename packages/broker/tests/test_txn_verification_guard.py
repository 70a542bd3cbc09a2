"""A leader's transaction verification guard (Kafka's VerificationGuard): a transactional batch
starts a transaction on a partition only with the guard its verification was handed, and a
marker written while the coordinator was asked makes that guard stale."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gregor.broker.partition import Partition
from gregor.protocol.apis.leader_and_isr import LeaderAndIsrPartitionState
from gregor.protocol.errors import InvalidTxnStateError
from gregor.protocol.records import BatchBuilder, ControlType
from gregor.storage import Log, LogConfig, open_log

PID, EPOCH = 7, 0


class Host:
    """A single-replica broker that hears nothing."""

    broker_id = 1
    replica_lag_time_max_ms = 30_000

    def is_alive(self, broker_id: int) -> bool:
        return True

    def partition_changed(self, partition: Partition) -> None: ...
    def notify_end_offset(self, partition: Partition) -> None: ...
    def notify_high_watermark(self, partition: Partition) -> None: ...
    def notify_follower_progress(self, partition: Partition) -> None: ...
    def submit_isr_change(
        self, partition: Partition, new_isr: frozenset[int], expand: bool
    ) -> None: ...


@pytest.fixture
def leader(tmp_path: Path) -> Iterator[Partition]:
    log: Log = open_log(tmp_path / "t-0", LogConfig.from_properties({}))
    partition = Partition(Host(), "t", 0)
    state = LeaderAndIsrPartitionState(leader=1, leader_epoch=1, isr=[1], replicas=[1])
    partition.make_leader(state, log)
    yield partition
    log.close()


def txn_batch(seq: int) -> bytes:
    builder = BatchBuilder(
        producer_id=PID, producer_epoch=EPOCH, base_sequence=seq, is_transactional=True
    )
    builder.append(b"x")
    return builder.build()


def test_a_transaction_starts_only_with_the_guard_kept(leader: Partition) -> None:
    with pytest.raises(InvalidTxnStateError):  # never verified
        leader.append_as_leader(txn_batch(0), 1, verified=True)
    guard = leader.start_txn_verification(PID)
    assert guard is not None and leader.start_txn_verification(PID) is guard  # joined
    assert leader.append_as_leader(txn_batch(0), 1, verified=True, guard=guard).first_offset == 0
    # Ongoing now: nothing to verify, and later batches need no guard.
    assert leader.start_txn_verification(PID) is None
    assert leader.append_as_leader(txn_batch(1), 1, verified=True).first_offset == 1
    # The broker's own writers are not verified.
    leader.append_txn_marker(PID, EPOCH, ControlType.COMMIT, 0)
    assert leader.append_as_leader(txn_batch(2), 1).first_offset == 3


def test_a_marker_during_the_verification_makes_its_guard_stale(leader: Partition) -> None:
    guard = leader.start_txn_verification(PID)
    # The coordinator aborts (say on timeout) while the leader waits for its answer.
    leader.append_txn_marker(PID, EPOCH, ControlType.ABORT, 0)
    end = leader.local_log().log_end_offset
    with pytest.raises(InvalidTxnStateError):
        leader.append_as_leader(txn_batch(0), 1, verified=True, guard=guard)
    assert leader.local_log().log_end_offset == end
    assert leader.local_log().producer_state.producers[PID].current_txn_first_offset is None
