"""The controller against a real ZooKeeper and broker peers on real TCP: election and
failover, fencing, topic creation, leader election on broker loss and return, deletion,
partition increase, reassignment, preferred and unclean elections, controlled shutdown."""

from __future__ import annotations

from typing import Any

import pytest

from gregor.broker.controller import ElectionType
from gregor.broker.controller.events import ApiError
from gregor.broker.zk import KafkaZkClient, LeaderAndIsr, TopicPartition, znodes
from gregor.protocol.errors import ErrorCode

T0, T1, T2 = (TopicPartition("orders", p) for p in range(3))


def admin(control_plane: Any) -> KafkaZkClient:
    assert control_plane.admin is not None
    return control_plane.admin  # type: ignore[no-any-return]


async def state_of(control_plane: Any, tp: TopicPartition) -> LeaderAndIsr | None:
    return await admin(control_plane).get_partition_state(tp)


async def wait_for_state(
    control_plane: Any, tp: TopicPartition, what: str, check: Any
) -> LeaderAndIsr:
    async def holds() -> bool:
        state = await state_of(control_plane, tp)
        return state is not None and bool(check(state))

    await control_plane.wait_until_async(holds, what)
    state = await state_of(control_plane, tp)
    assert state is not None
    return state


async def three_brokers(control_plane: Any, **settings: Any) -> None:
    for broker_id in (1, 2, 3):
        await control_plane.add(broker_id, **settings)
    node = await control_plane.wait_for_controller()
    await control_plane.wait_until(
        lambda: len(node.controller.context.live_broker_ids) == 3, "three live brokers"
    )


async def test_one_controller_is_elected_and_a_second_takes_over(control_plane: Any) -> None:
    first = await control_plane.add(1)
    assert (await control_plane.wait_for_controller()) is first
    second = await control_plane.add(2)
    await control_plane.wait_until(lambda: 2 in first.peer.live_brokers(), "broker 2 announced")
    assert not second.active
    epoch = first.controller.epoch
    # Every broker (the controller's own included) hears from the controller over TCP.
    assert first.peer.of("UpdateMetadataRequest")[-1].controller_id == 1
    assert {r.controller_epoch for r in second.peer.received} == {epoch}
    await first.stop()
    assert (await control_plane.wait_for_controller()) is second
    assert second.controller.epoch == epoch + 1
    assert await admin(control_plane).get_controller_epoch() == (epoch + 1, epoch + 1)
    await control_plane.wait_until(lambda: second.peer.live_brokers() == {2}, "broker 1 gone")
    assert second.peer.received[-1].controller_epoch == epoch + 1


async def test_topic_creation_elects_leaders_and_tells_every_broker(control_plane: Any) -> None:
    await three_brokers(control_plane)
    topic_id = znodes.new_topic_id()
    await admin(control_plane).create_topic_assignment(
        "orders", topic_id, {0: [1, 2, 3], 1: [2, 3, 1], 2: [3, 1, 2]}
    )
    for tp, leader in ((T0, 1), (T1, 2), (T2, 3)):
        state = await wait_for_state(control_plane, tp, f"{tp} created", lambda s: True)
        assert (state.leader, state.leader_epoch, state.zk_version) == (leader, 0, 0)
        assert set(state.isr) == {1, 2, 3}
    for node in control_plane.nodes.values():
        await control_plane.wait_until(lambda n=node: len(n.peer.metadata()) == 3, "metadata")
        # Each replica was told to lead or follow each partition, as a new replica.
        states = dict(node.peer.leader_and_isr_states())
        assert set(states) == {T0, T1, T2}
        assert all(s.is_new for s in states.values())
        assert states[T1].leader == 2 and list(states[T1].replicas) == [2, 3, 1]
        request = node.peer.of("LeaderAndIsrRequest")[-1]
        assert request.version == 7 and request.body.topic_states[0].topic_id == topic_id
        assert node.peer.metadata()[T2].leader == 3


async def test_broker_loss_moves_leadership_within_the_isr_and_return_rejoins(
    control_plane: Any,
) -> None:
    await three_brokers(control_plane)
    await admin(control_plane).create_topic_assignment("orders", None, {0: [1, 2, 3], 1: [2, 3, 1]})
    await wait_for_state(control_plane, T1, "created", lambda s: True)
    controller = control_plane.controller()
    victim = 2 if controller.broker_id != 2 else 3
    await control_plane.nodes[victim].stop()
    if victim == 2:
        state = await wait_for_state(
            control_plane, T1, "a new leader for p1", lambda s: s.leader == 3
        )
        assert state.leader_epoch == 1 and set(state.isr) == {1, 3}
    state0 = await wait_for_state(
        control_plane, T0, "victim out of p0's ISR", lambda s: victim not in s.isr
    )
    assert state0.leader == 1 and state0.leader_epoch == 1
    # The survivors heard it; the dead broker did not.
    for node in control_plane.nodes.values():
        if node.broker_id != victim:
            await control_plane.wait_until(
                lambda n=node: victim not in n.peer.metadata()[T0].isr, "shrunk ISR announced"
            )
            assert victim in node.peer.metadata()[T0].offline_replicas
    # The broker returns: it is told its replicas again and announced to everyone.
    returned = control_plane.nodes[victim]
    before = len(returned.peer.leader_and_isr_states())
    await returned.start(control_plane.nursery)
    await control_plane.wait_until(
        lambda: {tp for tp, _ in returned.peer.leader_and_isr_states()[before:]} == {T0, T1},
        "LeaderAndIsr for the returning broker",
    )
    told = dict(returned.peer.leader_and_isr_states()[before:])
    assert told[T0].leader == 1 and victim not in told[T0].isr  # it follows, out of sync
    for node in control_plane.nodes.values():
        await control_plane.wait_until(
            lambda n=node: victim in n.peer.live_brokers(), "victim live"
        )


def followers(control_plane: Any) -> tuple[int, int]:
    """Two brokers that are not the controller (so stopping them keeps it)."""
    controller = control_plane.controller().broker_id
    first, second = (b for b in (1, 2, 3) if b != controller)
    return first, second


async def test_no_eligible_leader_without_unclean_election(control_plane: Any) -> None:
    await three_brokers(control_plane)
    a, b = followers(control_plane)
    controller = control_plane.controller().controller
    z = admin(control_plane)
    await z.create_topic_assignment("orders", None, {0: [a, b]})
    await wait_for_state(control_plane, T0, "created", lambda s: True)
    # The leader shrinks the ISR to itself, as it would when its follower lags; then it dies.
    assert await z.update_leader_and_isr(T0, LeaderAndIsr(a, 0, (a,), controller.epoch), 0) == 1
    await z.propagate_isr_changes([T0])
    await control_plane.wait_until(
        lambda: controller.context.leadership[T0].isr == (a,), "ISR change"
    )
    await control_plane.nodes[a].stop()
    state = await wait_for_state(control_plane, T0, "leaderless", lambda s: s.leader == -1)
    assert state.isr == (a,)  # the last in-sync replica stays in the ISR: it has the data
    assert controller.metrics()["OfflinePartitionsCount"] == 1
    await control_plane.wait_until(
        lambda: control_plane.nodes[b].peer.metadata()[T0].leader == -1,
        "the offline leader announced",
    )
    # Enabling unclean election for the topic lets the out-of-sync replica lead.
    await z.change_entity_config("topics", "orders", {"unclean.leader.election.enable": "true"})
    controller.enable_unclean_leader_election("orders")
    state = await wait_for_state(control_plane, T0, "an unclean leader", lambda s: s.leader == b)
    assert (state.isr, state.leader_epoch) == ((b,), 2)  # one bump per leader change
    assert controller.metrics()["UncleanLeaderElections"] == 1


async def test_preferred_and_unclean_elections_through_the_api(control_plane: Any) -> None:
    await three_brokers(control_plane)
    a, b = followers(control_plane)
    controller = control_plane.controller().controller
    z = admin(control_plane)
    await z.create_topic_assignment("orders", None, {0: [a, b]})
    await wait_for_state(control_plane, T0, "created", lambda s: True)
    unknown = TopicPartition("nope", 0)
    results = await controller.elect_leaders({T0, unknown}, ElectionType.PREFERRED)
    assert results[T0] == ApiError(ErrorCode.ELECTION_NOT_NEEDED)
    assert results[unknown] == ApiError(
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "The partition does not exist."
    )
    # The preferred replica dies and comes back: alive, but not in sync yet.
    await control_plane.nodes[a].stop()
    await wait_for_state(control_plane, T0, "leader moved to b", lambda s: s.leader == b)
    await control_plane.nodes[a].start(control_plane.nursery)
    await control_plane.wait_until(lambda: a in controller.context.live_broker_ids, "a back")
    results = await controller.elect_leaders({T0}, ElectionType.PREFERRED)
    assert isinstance(results[T0], ApiError)
    assert results[T0].code == ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
    # Leader b sees a catch up and expands the ISR; now the preferred election succeeds.
    state = await wait_for_state(control_plane, T0, "read", lambda s: True)
    expanded = LeaderAndIsr(b, state.leader_epoch, (b, a), state.controller_epoch)
    assert await z.update_leader_and_isr(T0, expanded, state.zk_version) is not None
    assert await controller.elect_leaders({T0}, ElectionType.PREFERRED) == {T0: a}
    state = await wait_for_state(control_plane, T0, "preferred leader", lambda s: s.leader == a)
    assert set(state.isr) == {a, b}
    assert controller.metrics()["PreferredReplicaImbalanceCount"] == 0
    unclean = await controller.elect_leaders({T0}, ElectionType.UNCLEAN)
    assert unclean == {T0: ApiError(ErrorCode.ELECTION_NOT_NEEDED)}


async def test_topic_deletion_stops_and_deletes_replicas(control_plane: Any) -> None:
    await three_brokers(control_plane)
    await admin(control_plane).create_topic_assignment("orders", None, {0: [1, 2], 1: [2, 3]})
    await admin(control_plane).change_entity_config("topics", "orders", {"retention.ms": "1"})
    await wait_for_state(control_plane, T1, "created", lambda s: True)
    await admin(control_plane).create_delete_topic_path("orders")

    async def gone() -> bool:
        # The controller forgets the topic after its last znode goes (as Kafka's does), and
        # its task may resume after this one has seen the znodes gone: wait for both.
        z = admin(control_plane)
        node = control_plane.controller()
        return (
            not await z.topic_exists("orders")
            and not await z.get_topic_deletions()
            and node is not None
            and "orders" not in node.controller.context.all_topics
        )

    await control_plane.wait_until_async(gone, "the topic deleted")
    assert await admin(control_plane).get_entity_configs("topics", "orders") == {}
    assert (T0, True) in control_plane.nodes[1].peer.stop_replicas()
    assert (T1, True) in control_plane.nodes[3].peer.stop_replicas()
    # Brokers were told the topic is going away (leader -2) before replicas were deleted.
    deleting = [
        p.leader
        for r in control_plane.nodes[3].peer.of("UpdateMetadataRequest")
        for t in r.body.topic_states
        for p in t.partition_states
    ]
    assert znodes.LEADER_DURING_DELETE in deleting


async def test_partition_count_increase(control_plane: Any) -> None:
    await three_brokers(control_plane)
    z = admin(control_plane)
    await z.create_topic_assignment("orders", znodes.new_topic_id(), {0: [1, 2]})
    await wait_for_state(control_plane, T0, "created", lambda s: True)
    current = await z.get_topic_assignments(["orders"])
    partitions = dict(current["orders"].partitions)
    partitions[1] = znodes.ReplicaAssignment((3, 1))
    await z.set_topic_assignment("orders", current["orders"].topic_id, partitions)
    state = await wait_for_state(control_plane, T1, "the new partition", lambda s: True)
    assert (state.leader, set(state.isr)) == (3, {1, 3})
    await control_plane.wait_until(
        lambda: T1 in control_plane.nodes[2].peer.metadata(), "the new partition announced"
    )


async def test_reassignment_moves_replicas_in_phases(control_plane: Any) -> None:
    await three_brokers(control_plane)
    z = admin(control_plane)
    await z.create_topic_assignment("orders", znodes.new_topic_id(), {0: [1, 2]})
    await wait_for_state(control_plane, T0, "created", lambda s: True)
    node = control_plane.controller()
    result = await node.controller.alter_partition_reassignments({T0: [2, 3]})
    assert result == {T0: ApiError(ErrorCode.NONE)}
    # Phase A: RS = TRS + ORS, adding 3, removing 1; broker 3 starts as a new replica.
    assignment = (await z.get_topic_assignments(["orders"]))["orders"].partitions[0]
    assert assignment == znodes.ReplicaAssignment((2, 3, 1), adding=(3,), removing=(1,))
    listed = await node.controller.list_partition_reassignments(None)
    assert listed == {T0: assignment}
    await control_plane.wait_until(
        lambda: control_plane.nodes[3].peer.latest_leader_and_isr(T0) is not None, "broker 3 told"
    )
    told = control_plane.nodes[3].peer.latest_leader_and_isr(T0)
    assert told.is_new and list(told.adding_replicas) == [3] and list(told.removing_replicas) == [1]
    # The leader (broker 1) sees broker 3 catch up and expands the ISR, as a leader does.
    state = await state_of(control_plane, T0)
    assert state is not None and state.leader == 1 and state.leader_epoch == 1
    expanded = LeaderAndIsr(1, state.leader_epoch, (1, 2, 3), state.controller_epoch)
    assert await z.update_leader_and_isr(T0, expanded, state.zk_version) is not None
    await z.propagate_isr_changes([T0])
    # Phase B: leadership moves into the target set, broker 1 is stopped and deleted.
    final = await wait_for_state(control_plane, T0, "reassignment done", lambda s: s.isr == (2, 3))
    assert final.leader == 2
    done = (await z.get_topic_assignments(["orders"]))["orders"].partitions[0]
    assert done == znodes.ReplicaAssignment((2, 3))
    await control_plane.wait_until(
        lambda: (T0, True) in control_plane.nodes[1].peer.stop_replicas(), "deleted"
    )
    assert await node.controller.list_partition_reassignments(None) == {}
    # Errors are Kafka's.
    bad = await node.controller.alter_partition_reassignments(
        {T0: [], T1: [1, 1], TopicPartition("none", 0): [1]}
    )
    assert isinstance(bad, dict)
    assert bad[T0].code == bad[T1].code == ErrorCode.INVALID_REPLICA_ASSIGNMENT
    assert bad[TopicPartition("none", 0)].code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert (await node.controller.alter_partition_reassignments({T0: None}))[T0].code == (  # type: ignore[index]
        ErrorCode.NO_REASSIGNMENT_IN_PROGRESS
    )


async def test_controlled_shutdown_moves_leadership_away(control_plane: Any) -> None:
    await three_brokers(control_plane)
    z = admin(control_plane)
    await z.create_topic_assignment("orders", None, {0: [1, 2, 3], 1: [2, 3, 1], 2: [3, 1, 2]})
    await wait_for_state(control_plane, T2, "created", lambda s: True)
    controller = control_plane.controller().controller
    leaving, _ = followers(control_plane)
    epoch = control_plane.nodes[leaving].controller.broker_epoch
    with pytest.raises(Exception, match="broker epoch"):
        await controller.controlled_shutdown(leaving, epoch - 1)
    led_before = {tp for tp in (T0, T1, T2) if controller.context.leadership[tp].leader == leaving}
    assert len(led_before) == 1
    assert await controller.controlled_shutdown(leaving, epoch) == set()
    for tp in (T0, T1, T2):
        state = await state_of(control_plane, tp)
        assert state is not None and state.leader != leaving and leaving not in state.isr
        if tp not in led_before:
            assert state.leader_epoch == 1  # ISR shrink bumps the epoch too
    # Where it followed, it was told to stop replicating (keeping its data).
    stopped = set(control_plane.nodes[leaving].peer.stop_replicas())
    assert {(tp, False) for tp in (T0, T1, T2) if tp not in led_before} <= stopped


async def test_controlled_shutdown_leaves_out_what_no_retry_could_move(
    control_plane: Any,
) -> None:
    for broker_id in (1, 2):
        await control_plane.add(broker_id)
    controller = (await control_plane.wait_for_controller()).controller
    z = admin(control_plane)
    # Broker 3 is not up yet: it starts outside the ISR of orders-0.
    await z.create_topic_assignment("orders", None, {0: [1, 3], 1: [1, 2]})
    state = await wait_for_state(control_plane, T0, "created", lambda s: s.leader == 1)
    assert state.isr == (1,)
    await control_plane.add(3)
    await control_plane.wait_until(lambda: 3 in controller.context.live_broker_ids, "broker 3")

    async def shut_down(broker_id: int) -> set[TopicPartition]:
        epoch = control_plane.nodes[broker_id].controller.broker_epoch
        return await controller.controlled_shutdown(broker_id, epoch)  # type: ignore[no-any-return]

    # orders-1 moves to broker 2. orders-0 cannot move yet, but broker 3 is live and may
    # join the ISR, so a retry could help: it remains, as in Kafka.
    assert await shut_down(1) == {T0}
    assert (await state_of(control_plane, T1)).leader == 2  # type: ignore[union-attr]
    # Once broker 3 is shutting down too, nothing could ever take orders-0 over.
    assert await shut_down(3) == set()
    assert await shut_down(1) == set()
    # The last broker: orders-1's other replica is leaving, so it does not remain either.
    assert await shut_down(2) == set()
    assert (await state_of(control_plane, T1)).leader == 2  # type: ignore[union-attr]


async def test_a_new_controller_finishes_a_deletion_in_flight(control_plane: Any) -> None:
    await three_brokers(control_plane)
    z = admin(control_plane)
    node = control_plane.controller()
    others = [b for b in (1, 2, 3) if b != node.broker_id]
    await z.create_topic_assignment("orders", None, {0: others})
    await wait_for_state(control_plane, T0, "created", lambda s: True)
    # The controller dies as the deletion is requested.
    await z.create_delete_topic_path("orders")
    await node.stop()

    async def gone() -> bool:
        return not await z.topic_exists("orders")

    await control_plane.wait_until_async(gone, "the deletion completed by the next controller")
    assert control_plane.controller() is not node


async def test_session_expiry_of_the_controller_resigns_and_reelects(control_plane: Any) -> None:
    from kazoo.client import KazooClient

    await three_brokers(control_plane)
    node = control_plane.controller()
    epoch = node.controller.epoch
    session_id, password = node.zk.session.kazoo.client_id
    thief = KazooClient(control_plane.zk_connect.split("/")[0], client_id=(session_id, password))
    thief.start(timeout=15)
    thief.stop()
    thief.close()
    # A new controller is elected with a higher epoch, and the old one re-registered.
    await control_plane.wait_until(
        lambda: (
            control_plane.controller() is not None
            and control_plane.controller().controller.epoch > epoch
        ),
        "a new election",
    )
    brokers = await admin(control_plane).get_broker_ids()
    await control_plane.wait_until_async(
        lambda: _has_broker(control_plane, node.broker_id), "the expired broker registered again"
    )
    assert set(brokers) <= {1, 2, 3}


async def _has_broker(control_plane: Any, broker_id: int) -> bool:
    return broker_id in await admin(control_plane).get_broker_ids()
