"""KafkaZkClient against a real ZooKeeper: Kafka's znodes, compare-and-set, fencing, watches
and session expiry."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from functools import partial

import pytest
import trio
from kazoo.client import KazooClient

from gregor.broker.coordinator.group.zk_offsets import commit_offset, fetch_offset
from gregor.broker.zk import (
    BrokerEndpoint,
    BrokerIdInUseError,
    BrokerRegistration,
    ControllerMovedError,
    KafkaZkClient,
    LeaderAndIsr,
    TopicExistsError,
    TopicPartition,
    znodes,
)
from gregor.devcluster import ZooKeeper
from gregor_testing.processes import zookeeper_client

BROKER = BrokerRegistration(
    1, (BrokerEndpoint("PLAINTEXT", "127.0.0.1", 9092, "PLAINTEXT"),), rack="r1"
)


@pytest.fixture
async def zk(zk_connect: str) -> AsyncIterator[KafkaZkClient]:
    client = KafkaZkClient(zk_connect, session_timeout_ms=6000)
    await client.start()
    try:
        yield client
    finally:
        await client.close()


async def wait_for(predicate: object, what: str, timeout: float = 20.0) -> None:
    with trio.fail_after(timeout):
        while not predicate():  # type: ignore[operator]
            await trio.sleep(0.02)


async def test_missing_chroot_is_created(zookeeper: ZooKeeper) -> None:
    connect = zookeeper.connect + "/fresh-chroot/deeper"
    client = KafkaZkClient(connect)
    await client.start()
    try:
        assert await client.create_or_get_cluster_id("abc") == "abc"
        assert await client.create_or_get_cluster_id("other") == "abc"
    finally:
        await client.close()
    with zookeeper_client(zookeeper.connect) as root:
        data, _ = root.get("/fresh-chroot/deeper/cluster/id")
        assert json.loads(data) == {"version": "1", "id": "abc"}
        for path in znodes.PERSISTENT_PATHS:
            assert root.exists("/fresh-chroot/deeper" + path), path


async def test_broker_registration_and_duplicate_id(zk: KafkaZkClient, zk_connect: str) -> None:
    epoch = await zk.register_broker(BROKER)
    assert epoch > 0
    brokers = await zk.get_all_brokers()
    assert brokers == {1: (BROKER, epoch)}
    other = KafkaZkClient(zk_connect)
    await other.start()
    try:
        with pytest.raises(BrokerIdInUseError, match=r"same broker\.id"):
            await other.register_broker(BROKER)
    finally:
        await other.close()
    # Kafka's JSON, readable by Kafka's own tools.
    with zookeeper_client(zk_connect) as client:
        data, stat = client.get("/brokers/ids/1")
        assert stat.ephemeralOwner == zk.session_id
        obj = json.loads(data)
        assert obj["endpoints"] == ["PLAINTEXT://127.0.0.1:9092"]
        assert obj["listener_security_protocol_map"] == {"PLAINTEXT": "PLAINTEXT"}
        assert (obj["host"], obj["port"], obj["rack"], obj["version"]) == (
            "127.0.0.1",
            9092,
            "r1",
            5,
        )
    # Registering again within the same session is idempotent.
    assert await zk.register_broker(BROKER) == epoch


async def test_controller_election_is_exclusive_and_fences_writes(zk_connect: str) -> None:
    first, second = KafkaZkClient(zk_connect), KafkaZkClient(zk_connect)
    await first.start()
    await second.start()
    try:
        epoch, version = await first.register_controller_and_increment_epoch(1)
        assert (epoch, await first.get_controller_id()) == (1, 1)
        with pytest.raises(ControllerMovedError):
            await second.register_controller_and_increment_epoch(2)
        tp = TopicPartition("t", 0)
        await first.create_topic_assignment("t", None, {0: [1]})
        state = LeaderAndIsr(1, 0, (1,), epoch)
        created = await first.create_partition_states({tp: state}, version)
        assert created[tp] == state
        # The first controller's session ends; the second takes over with a higher epoch.
        await first.close()
        new_epoch, new_version = await second.register_controller_and_increment_epoch(2)
        assert new_epoch == 2
        # A write fenced with the old epoch's version fails, one with the new succeeds.
        with pytest.raises(ControllerMovedError):
            await second.update_partition_states({tp: state.new_epoch(1)}, version)
        result = await second.update_partition_states({tp: state.new_epoch(2)}, new_version)
        assert result.retry == []
        written = result.finished[tp]
        assert isinstance(written, LeaderAndIsr)
        assert (written.leader_epoch, written.zk_version) == (1, 1)
    finally:
        await first.close()
        await second.close()


async def test_partition_state_compare_and_set(zk: KafkaZkClient) -> None:
    epoch, version = await zk.register_controller_and_increment_epoch(1)
    tp = TopicPartition("orders", 3)
    await zk.create_topic_assignment("orders", None, {3: [1, 2, 3]})
    await zk.create_partition_states({tp: LeaderAndIsr(1, 0, (1, 2, 3), epoch)}, version)
    state = await zk.get_partition_state(tp)
    assert state == LeaderAndIsr(1, 0, (1, 2, 3), epoch, zk_version=0)
    # The leader shrinks the ISR against the version it knows.
    shrunk = LeaderAndIsr(1, 0, (1, 2), epoch)
    assert await zk.update_leader_and_isr(tp, shrunk, expected_zk_version=0) == 1
    # The same write again (a retry whose first attempt had succeeded) is recognised.
    assert await zk.update_leader_and_isr(tp, shrunk, expected_zk_version=0) == 1
    # A write against a stale version that differs is a conflict.
    assert await zk.update_leader_and_isr(tp, LeaderAndIsr(1, 0, (1,), epoch), 0) is None
    # The controller's CAS against a stale version asks for a retry.
    stale = LeaderAndIsr(2, 1, (2,), epoch, zk_version=0)
    result = await zk.update_partition_states({tp: stale}, version)
    assert result.retry == [tp] and result.finished == {}
    assert (await zk.get_partition_state(tp)) == LeaderAndIsr(1, 0, (1, 2), epoch, zk_version=1)


async def test_topics_deletion_markers_and_notifications(zk: KafkaZkClient) -> None:
    await zk.create_topic_assignment("t", znodes.new_topic_id(), {0: [1, 2], 1: [2, 1]})
    with pytest.raises(TopicExistsError):
        await zk.create_topic_assignment("t", None, {0: [1]})
    assignments = await zk.get_topic_assignments(["t", "missing"])
    assert list(assignments) == ["t"]
    assert {p: a.replicas for p, a in assignments["t"].partitions.items()} == {
        0: (1, 2),
        1: (2, 1),
    }
    await zk.create_delete_topic_path("t")
    with pytest.raises(TopicExistsError):
        await zk.create_delete_topic_path("t")
    assert await zk.get_topic_deletions() == {"t"}
    await zk.propagate_isr_changes([TopicPartition("t", 0)])
    await zk.propagate_isr_changes([TopicPartition("t", 1), TopicPartition("t", 0)])
    numbers = await zk.get_isr_change_notifications()
    assert len(numbers) == 2
    assert await zk.get_partitions_from_isr_changes(numbers) == {
        TopicPartition("t", 0),
        TopicPartition("t", 1),
    }
    await zk.delete_isr_change_notifications(numbers, -1)
    assert await zk.get_isr_change_notifications() == []
    await zk.delete_topic_znode("t", -1)
    assert not await zk.topic_exists("t")


async def test_configs_and_change_notifications(zk: KafkaZkClient, zk_connect: str) -> None:
    await zk.change_entity_config("topics", "t", {"retention.ms": "1000"})
    await zk.change_entity_config("brokers", "<default>", {"log.retention.ms": "5"})
    assert await zk.get_entity_configs("topics", "t") == {"retention.ms": "1000"}
    assert await zk.get_entities_configs("topics", ["t", "u"]) == {
        "t": {"retention.ms": "1000"},
        "u": {},
    }
    with zookeeper_client(zk_connect) as client:
        changes = sorted(client.get_children("/config/changes"))
        assert changes == ["config_change_0000000000", "config_change_0000000001"]
        data, _ = client.get("/config/changes/" + changes[1])
        assert json.loads(data) == {"version": 2, "entity_path": "brokers/<default>"}
        data, _ = client.get("/config/topics/t")
        assert json.loads(data) == {"version": 1, "config": {"retention.ms": "1000"}}


async def test_set_or_create_and_v0_offsets(zk: KafkaZkClient, zk_connect: str) -> None:
    # OffsetCommit v0 keeps offsets where the old ZooKeeper consumers kept them.
    assert await fetch_offset(zk, "g", "orders", 3) is None
    await commit_offset(zk, "g", "orders", 3, 42)  # creates the parents too
    await commit_offset(zk, "g", "orders", 4, 7)
    await commit_offset(zk, "g", "orders", 3, 43)  # overwrites
    assert await fetch_offset(zk, "g", "orders", 3) == 43
    assert await fetch_offset(zk, "g", "orders", 4) == 7
    await zk.set_or_create("/plain/node", b"one")
    await zk.set_or_create("/plain/node", b"two")
    with zookeeper_client(zk_connect) as client:
        assert client.get("/consumers/g/offsets/orders/3")[0] == b"43"
        assert sorted(client.get_children("/consumers/g/offsets/orders")) == ["3", "4"]
        data, stat = client.get("/plain/node")
        assert (data, stat.version) == (b"two", 1)


async def test_producer_id_blocks_are_disjoint(zk_connect: str) -> None:
    clients = [KafkaZkClient(zk_connect) for _ in range(3)]
    for c in clients:
        await c.start()
    blocks: list[znodes.ProducerIdBlock] = []
    try:

        async def claim(client: KafkaZkClient, broker_id: int) -> None:
            for _ in range(4):
                block = await client.allocate_producer_id_block(broker_id)
                blocks.append(block)

        async with trio.open_nursery() as nursery:
            for i, c in enumerate(clients):
                nursery.start_soon(claim, c, i)
    finally:
        for c in clients:
            await c.close()
    starts = sorted(b.first_producer_id for b in blocks)
    assert starts == [i * 1000 for i in range(12)]


async def test_watch_handlers_fire_and_rearm(zk: KafkaZkClient, zk_connect: str) -> None:
    seen: list[str] = []
    zk.set_child_handler("/brokers/ids", lambda: seen.append("ids"))
    zk.set_node_handler("/controller", lambda: seen.append("controller"))
    assert await zk.get_broker_ids(watch=True) == []
    assert await zk.get_controller_id(watch=True) is None
    await zk.register_broker(BROKER)
    await wait_for(lambda: "ids" in seen, "the /brokers/ids watch")
    await zk.register_controller_and_increment_epoch(1)
    await wait_for(lambda: "controller" in seen, "the /controller watch")
    # One-shot: nothing more fires until the path is read with a watch again. ZooKeeper
    # delivers a session's watch events in order, so once a watch armed on a later change has
    # fired, an event for the earlier one would already have been seen.
    seen.clear()
    zk.set_node_handler("/barrier", lambda: seen.append("barrier"))
    assert not await zk.exists("/barrier", watch=True)
    await zk.register_broker(BrokerRegistration(2, BROKER.endpoints))
    with zookeeper_client(zk_connect) as client:
        client.create("/barrier")
    await wait_for(lambda: "barrier" in seen, "the barrier's watch")
    assert seen == ["barrier"]
    seen.clear()
    assert await zk.get_broker_ids(watch=True) == [1, 2]
    with zookeeper_client(zk_connect) as client:
        client.create("/brokers/ids/7", b"{}", ephemeral=True)
        await wait_for(lambda: seen == ["ids"], "the re-armed watch")


class Recorder:
    def __init__(self) -> None:
        self.events: list[str] = []

    def session_expired(self) -> None:
        self.events.append("expired")

    def session_established(self) -> None:
        self.events.append("established")


async def test_session_expiry_is_reported_and_the_broker_can_register_again(
    proxy: StallingProxy, proxied: tuple[KafkaZkClient, Recorder], zk_connect: str
) -> None:
    zk, recorder = proxied
    rearmed: list[str] = []
    zk.set_child_handler("/brokers/ids", lambda: rearmed.append("ids"))
    await zk.register_broker(BROKER)
    old_session = zk.session_id
    # ZooKeeper's way to expire a session on demand: another client joins it and leaves.
    # The broker is cut off meanwhile, or it could take its session back first.
    proxy.stall(1_000_000)
    await trio.to_thread.run_sync(expire, zk_connect, zk.session.kazoo.client_id)
    proxy.heal()
    await wait_for(lambda: recorder.events == ["expired", "established"], "a new session")
    assert zk.session_id not in (old_session, -1)
    assert "ids" in rearmed  # every handler fired, so watches get re-armed
    assert await zk.get_broker_ids() == []  # the ephemeral went with the old session
    epoch = await zk.register_broker(BROKER)
    assert (await zk.get_all_brokers())[1] == (BROKER, epoch)


def expire(zk_connect: str, client_id: tuple[int, bytes]) -> None:
    thief = KazooClient(zk_connect.split("/")[0], client_id=client_id)
    thief.start(timeout=15)
    thief.stop()
    thief.close()


async def test_calls_wait_for_zookeeper_to_come_back(own_zookeeper: ZooKeeper) -> None:
    client = KafkaZkClient(own_zookeeper.connect, session_timeout_ms=30000)
    await client.start()
    fired: list[str] = []
    client.set_child_handler("/brokers/ids", lambda: fired.append("ids"))
    try:
        await client.register_broker(BROKER)
        assert await client.get_broker_ids(watch=True) == [1]
        own_zookeeper.kill()
        answer: list[list[int]] = []

        async def ask() -> None:
            answer.append(await client.get_broker_ids())

        async with trio.open_nursery() as nursery:
            nursery.start_soon(ask)
            await wait_for(lambda: not client.session.connected, "the connection lost")
            assert answer == []  # waiting for ZooKeeper, not failing
            await trio.to_thread.run_sync(own_zookeeper.start)
        # The session outlived the outage (shorter than its timeout): the ephemeral stayed,
        # and every watch handler fired so that watches get re-armed.
        assert answer == [[1]]
        assert "ids" in fired
    finally:
        await client.close()


class StallingProxy:
    """TCP in front of ZooKeeper that can cut its clients off: drop their connections and
    accept the next ones without ever reading them. A restarting ZooKeeper does that (3.8
    accepts connections during its startup and leaves the handshake unanswered)."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.port = 0
        self.to_stall = 0
        self.stalled = 0  # connections left unanswered so far
        self._open: list[trio.CancelScope] = []

    async def handle(self, stream: trio.SocketStream) -> None:
        with trio.CancelScope() as scope:
            self._open.append(scope)
            async with stream:
                if self.to_stall:
                    self.to_stall -= 1
                    self.stalled += 1
                    await trio.sleep_forever()
                server = await trio.open_tcp_stream(*self.upstream)
                async with server, trio.open_nursery() as nursery:
                    nursery.start_soon(_pump, stream, server)
                    await _pump(server, stream)
                    nursery.cancel_scope.cancel()

    def stall(self, count: int) -> None:
        """Drop every connection, and leave the next `count` ones unanswered."""
        self.to_stall = count
        self._drop()

    def heal(self) -> None:
        """Forward again, dropping the unanswered connections so clients retry now."""
        self.to_stall = 0
        self._drop()

    def _drop(self) -> None:
        for scope in self._open:
            scope.cancel()
        self._open.clear()


async def _pump(source: trio.SocketStream, sink: trio.SocketStream) -> None:
    while data := await source.receive_some():
        await sink.send_all(data)


@pytest.fixture
async def proxy(zookeeper: ZooKeeper) -> AsyncIterator[StallingProxy]:
    proxy = StallingProxy((zookeeper.host, zookeeper.port))
    async with trio.open_nursery() as nursery:
        serve = partial(trio.serve_tcp, host=zookeeper.host, handler_nursery=nursery)
        listeners = await nursery.start(serve, proxy.handle, 0)
        proxy.port = listeners[0].socket.getsockname()[1]
        yield proxy
        nursery.cancel_scope.cancel()


@pytest.fixture
async def proxied(
    proxy: StallingProxy, zk_connect: str
) -> AsyncIterator[tuple[KafkaZkClient, Recorder]]:
    """A client reaching ZooKeeper through the proxy (a 9 s session), and what its session
    listener heard."""
    chroot = zk_connect.partition("/")[2]
    client = KafkaZkClient(f"{proxy.upstream[0]}:{proxy.port}/{chroot}", session_timeout_ms=9000)
    await client.start()
    recorder = Recorder()
    client.add_session_listener(recorder)
    try:
        yield client, recorder
    finally:
        await client.close()


async def test_an_unanswered_handshake_does_not_cost_the_session(
    proxy: StallingProxy, proxied: tuple[KafkaZkClient, Recorder]
) -> None:
    client, recorder = proxied
    await client.register_broker(BROKER)
    session = client.session_id
    # Each handshake waits a third of the session timeout: two unanswered ones in a row
    # still leave time to reach the server (waiting the whole timeout would not).
    proxy.stall(2)
    await wait_for(lambda: not client.session.connected, "the connection lost")
    assert await client.get_broker_ids() == [1]  # the ephemeral outlived the stalls
    assert proxy.stalled == 2
    assert client.session_id == session
    assert recorder.events == []
