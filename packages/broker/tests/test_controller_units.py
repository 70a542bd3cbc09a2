"""The controller's pure parts: election rules, state transitions, the requests a batch
builds for each protocol version, and the event queue's preemption."""

from __future__ import annotations

import uuid

import pytest
import trio

from gregor.broker.controller.batch import RequestBatch
from gregor.broker.controller.channel import ControllerChannelManager, ControlRequest
from gregor.broker.controller.context import (
    ControllerContext,
    PartitionReplica,
    PartitionState,
    ReplicaState,
)
from gregor.broker.controller.election import (
    Strategy,
    controlled_shutdown_leader,
    elect,
    offline_leader,
    preferred_leader,
    reassign_leader,
)
from gregor.broker.controller.events import (
    NOT_CONTROLLER,
    ApiError,
    ApiPartitionReassignment,
    ElectionTrigger,
    ElectionType,
    EventQueue,
    ReplicaLeaderElection,
    Reply,
    TopicChange,
)
from gregor.broker.zk.znodes import (
    BrokerEndpoint,
    BrokerRegistration,
    LeaderAndIsr,
    ReplicaAssignment,
    TopicPartition,
)
from gregor.protocol.apis.leader_and_isr import LeaderAndIsrRequest
from gregor.protocol.apis.stop_replica import StopReplicaRequest
from gregor.protocol.apis.update_metadata import UpdateMetadataRequest
from gregor.protocol.framing import decode_request, encode_request

TP = TopicPartition("orders", 0)


def test_election_rules() -> None:
    # Offline: first assigned replica alive and in sync; unclean falls back to any live one.
    assert offline_leader([1, 2, 3], isr=[2, 3], live=[1, 3], unclean=False) == (3, False)
    assert offline_leader([1, 2, 3], isr=[2], live=[1, 3], unclean=False) == (None, False)
    assert offline_leader([1, 2, 3], isr=[2], live=[3, 1], unclean=True) == (1, True)
    assert reassign_leader([4, 5], isr=[1, 5], live=[4, 5]) == 5
    assert preferred_leader([1, 2], isr=[1, 2], live=[1, 2]) == 1
    assert preferred_leader([1, 2], isr=[2], live=[1, 2]) is None
    assert controlled_shutdown_leader([1, 2, 3], [1, 2, 3], [1, 2, 3], shutting_down=[1]) == 2


def context_with(live: list[int], replicas: tuple[int, ...] = (1, 2, 3)) -> ControllerContext:
    context = ControllerContext()
    context.epoch = 7
    endpoint = BrokerEndpoint("PLAINTEXT", "h", 9092)
    context.set_live_brokers({b: (BrokerRegistration(b, (endpoint,)), 100 + b) for b in live})
    context.set_assignment(TP, ReplicaAssignment(replicas))
    return context


def test_elect_bumps_epoch_and_shrinks_isr_to_live_replicas() -> None:
    context = context_with(live=[2, 3])
    current = LeaderAndIsr(1, 4, (1, 2, 3), controller_epoch=5, zk_version=9)
    result = elect(context, TP, current, Strategy.OFFLINE)
    assert result.leader_and_isr == LeaderAndIsr(2, 5, (2, 3), 7, 9)
    assert result.recipients == (2, 3) and not result.unclean
    # Controlled shutdown: broker 2 is leaving and leaves the ISR.
    context.shutting_down.add(2)
    result = elect(context, TP, LeaderAndIsr(2, 5, (2, 3), 7), Strategy.CONTROLLED_SHUTDOWN)
    assert result.leader_and_isr is not None
    assert (result.leader_and_isr.leader, result.leader_and_isr.isr) == (3, (3,))


def test_unclean_election_makes_the_leader_the_only_in_sync_replica() -> None:
    context = context_with(live=[3])
    current = LeaderAndIsr(-1, 4, (1,), 5)
    assert elect(context, TP, current, Strategy.OFFLINE).leader_and_isr is None
    result = elect(context, TP, current, Strategy.OFFLINE, unclean_allowed=True)
    assert result.unclean and result.leader_and_isr == LeaderAndIsr(3, 5, (3,), 7)


def test_state_transitions_are_kafkas() -> None:
    assert PartitionState.NEW.valid_previous == {PartitionState.NON_EXISTENT}
    assert PartitionState.NON_EXISTENT.valid_previous == {PartitionState.OFFLINE}
    assert ReplicaState.DELETION_STARTED.valid_previous == {ReplicaState.OFFLINE}
    assert ReplicaState.NON_EXISTENT.valid_previous == {ReplicaState.DELETION_SUCCESSFUL}
    assert ReplicaState.ONLINE in ReplicaState.OFFLINE.valid_previous


class Recorder(ControllerChannelManager):
    """A channel manager that keeps what would be sent."""

    def __init__(self) -> None:
        super().__init__(controller_id=1, listener="PLAINTEXT")
        self.sent: list[tuple[int, ControlRequest]] = []

    def send(self, broker_id: int, request: ControlRequest) -> None:
        self.sent.append((broker_id, request))


def round_trip(request: ControlRequest, version: int) -> object:
    body = request.build(version)
    if body is None:
        return None
    _, decoded = decode_request(encode_request(body, version, 1, "t")[4:])  # no size prefix
    return decoded


def test_batch_builds_every_version() -> None:
    context = context_with(live=[1, 2, 3])
    topic_id = uuid.uuid4()
    context.add_topic_id("orders", topic_id)
    state = LeaderAndIsr(1, 3, (1, 2), 7, zk_version=5)
    context.leadership[TP] = state
    channels = Recorder()
    batch = RequestBatch(1, context, channels)
    batch.new_batch()
    batch.add_leader_and_isr([2], TP, state, ReplicaAssignment((1, 2, 3), (3,), ()), is_new=True)
    batch.add_stop_replica([3], TP, delete=True)
    batch.add_stop_replica([3], TopicPartition("orders", 1), delete=False)
    batch.send()
    assert batch.empty
    kinds = [(b, r.api.__name__) for b, r in channels.sent]
    assert (2, "LeaderAndIsrRequest") in kinds
    assert {b for b, k in kinds if k == "UpdateMetadataRequest"} == {1, 2, 3}
    leader_and_isr = next(r for b, r in channels.sent if r.api is LeaderAndIsrRequest)
    for version in range(8):
        decoded = round_trip(leader_and_isr, version)
        assert isinstance(decoded, LeaderAndIsrRequest)
        assert (decoded.controller_id, decoded.controller_epoch) == (1, 7)
        states = decoded.ungrouped_partition_states or [
            p for t in decoded.topic_states for p in t.partition_states
        ]
        assert [(p.leader, p.leader_epoch, list(p.isr), p.partition_epoch) for p in states] == [
            (1, 3, [1, 2], 5)
        ]
        if version >= 1:
            assert states[0].is_new
        if version >= 3:
            assert list(states[0].adding_replicas) == [3]
        if version >= 5:
            assert decoded.topic_states[0].topic_id == topic_id
        if version >= 2:
            assert decoded.broker_epoch == 102
    update = next(r for b, r in channels.sent if r.api is UpdateMetadataRequest)
    for version in range(9):
        decoded = round_trip(update, version)
        assert isinstance(decoded, UpdateMetadataRequest)
        assert sorted(b.id for b in decoded.live_brokers) == [1, 2, 3]
        states = decoded.ungrouped_partition_states or [
            p for t in decoded.topic_states for p in t.partition_states
        ]
        assert [(p.partition_index, p.leader, list(p.replicas)) for p in states] == [
            (0, 1, [1, 2, 3])
        ]
    stops = [r for b, r in channels.sent if r.api is StopReplicaRequest]
    for version in range(5):
        bodies = [round_trip(r, version) for r in stops]
        built = [b for b in bodies if isinstance(b, StopReplicaRequest)]
        if version >= 3:
            assert len(built) == 1
            parts = {
                (p.partition_index, p.delete_partition, p.leader_epoch)
                for t in built[0].topic_states
                for p in t.partition_states
            }
            assert parts == {(0, True, 3), (1, False, -1)}
        else:
            # Old versions carry one delete flag per request: two requests.
            assert sorted(b.delete_partitions for b in built) == [False, True]


def test_a_new_batch_refuses_to_drop_an_unsent_one() -> None:
    batch = RequestBatch(1, context_with(live=[1]), Recorder())
    batch.new_batch()
    batch.add_update_metadata([1])
    with pytest.raises(RuntimeError, match="UpdateMetadata for \\[1\\]"):
        batch.new_batch()


async def test_clearing_the_queue_answers_who_waits() -> None:
    queue = EventQueue()
    election: Reply[dict[TopicPartition, int | ApiError]] = Reply()
    reassignment: Reply[dict[TopicPartition, ApiError] | ApiError] = Reply()
    queue.put(ReplicaLeaderElection({TP}, ElectionType.PREFERRED, ElectionTrigger.ADMIN, election))
    queue.put(ApiPartitionReassignment({TP: [1]}, reassignment))
    queue.clear_and_put(TopicChange())
    assert await election.wait() == {TP: NOT_CONTROLLER}
    assert await reassignment.wait() == NOT_CONTROLLER
    assert len(queue) == 1
    assert isinstance(await queue.get(), TopicChange)
    with trio.move_on_after(0.05) as scope:
        await queue.get()
    assert scope.cancelled_caught
    assert PartitionReplica(TP, 1).topic == "orders"
