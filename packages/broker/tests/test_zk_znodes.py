"""Kafka's znode JSON, byte for byte where Kafka's format is fixed, and strict decoding."""

from __future__ import annotations

import json
import uuid

import pytest

from gregor.broker.zk import znodes
from gregor.broker.zk.znodes import (
    BrokerEndpoint,
    BrokerRegistration,
    LeaderAndIsr,
    ProducerIdBlock,
    ReplicaAssignment,
    TopicPartition,
    ZNodeDataError,
)

TP = TopicPartition("orders", 2)


def test_partition_state_is_kafkas_json() -> None:
    state = LeaderAndIsr(leader=3, leader_epoch=7, isr=(3, 1), controller_epoch=5)
    data = znodes.encode_partition_state(state)
    assert json.loads(data) == {
        "controller_epoch": 5,
        "leader": 3,
        "version": 1,
        "leader_epoch": 7,
        "isr": [3, 1],
    }
    assert b" " not in data  # compact, as Jackson writes it
    assert znodes.decode_partition_state(TP, data, 4) == LeaderAndIsr(3, 7, (3, 1), 5, 4)
    recovering = LeaderAndIsr(3, 7, (3,), 5, leader_recovery_state=1)
    assert json.loads(znodes.encode_partition_state(recovering))["leader_recovery_state"] == 1


def test_a_state_written_by_kafka_decodes() -> None:
    kafka = b'{"controller_epoch":1,"leader":0,"version":1,"leader_epoch":0,"isr":[0,1,2]}'
    assert znodes.decode_partition_state(TP, kafka, 0) == LeaderAndIsr(0, 0, (0, 1, 2), 1)


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"not json",
        b"[1,2]",
        b'{"leader":"1","leader_epoch":0,"isr":[],"controller_epoch":1}',
        b'{"leader":1,"leader_epoch":0,"isr":[true],"controller_epoch":1}',
        b'{"leader":1,"leader_epoch":0,"controller_epoch":1}',
        b'{"leader":true,"leader_epoch":0,"isr":[1],"controller_epoch":1}',
        b"\xff\xfe",
    ],
)
def test_malformed_partition_state_names_the_path(data: bytes) -> None:
    with pytest.raises(ZNodeDataError, match="/brokers/topics/orders/partitions/2/state"):
        znodes.decode_partition_state(TP, data, 0)


def test_leader_and_isr_transitions() -> None:
    state = LeaderAndIsr(1, 4, (1, 2, 3), controller_epoch=2, zk_version=9)
    moved = state.new_leader_and_isr(2, [2, 3], controller_epoch=3)
    assert moved == LeaderAndIsr(2, 5, (2, 3), 3, 9)
    assert state.new_epoch(3).leader_epoch == 5
    assert state.same_as(LeaderAndIsr(1, 4, (1, 2, 3), 2, zk_version=0))
    assert not state.same_as(moved)


def test_topic_znode_with_id_and_reassignment() -> None:
    topic_id = uuid.UUID("3c9f1b2e-8a4d-4c6b-9e7f-0a1b2c3d4e5f")
    partitions = {
        1: ReplicaAssignment((4, 5, 1, 2), adding=(4, 5), removing=(1, 2)),
        0: ReplicaAssignment((1, 2)),
    }
    data = znodes.encode_topic(topic_id, partitions)
    obj = json.loads(data)
    assert obj == {
        "partitions": {"0": [1, 2], "1": [4, 5, 1, 2]},
        "adding_replicas": {"1": [4, 5]},
        "removing_replicas": {"1": [1, 2]},
        "version": 3,
        "topic_id": "PJ8bLopNTGuefwobLD1OXw",
    }
    decoded = znodes.decode_topic("t", data)
    assert decoded.topic_id == topic_id
    assert dict(decoded.partitions) == partitions


def test_topic_znode_of_old_kafka_without_id() -> None:
    decoded = znodes.decode_topic("t", b'{"version":1,"partitions":{"0":[1,2,3],"1":[2,3,1]}}')
    assert decoded.topic_id is None
    assert decoded.partitions[1] == ReplicaAssignment((2, 3, 1))


def test_replica_assignment_reassignment_phases() -> None:
    # Kafka's documented example: {1,2,3} -> {4,5,6}.
    original = ReplicaAssignment((1, 2, 3))
    moving = original.reassign_to([4, 5, 6])
    assert moving == ReplicaAssignment((4, 5, 6, 1, 2, 3), (4, 5, 6), (1, 2, 3))
    assert moving.origin_replicas == (1, 2, 3)
    assert moving.target_replicas == (4, 5, 6)
    assert moving.is_being_reassigned
    # Overlapping targets: kept replicas are neither added nor removed.
    overlapping = original.reassign_to([3, 4, 2])
    assert overlapping == ReplicaAssignment((3, 4, 2, 1), adding=(4,), removing=(1,))
    # Cancelling goes back to the origin replicas.
    assert moving.reassign_to(moving.origin_replicas) == ReplicaAssignment((1, 2, 3))
    assert moving.remove_replica(1) == ReplicaAssignment((4, 5, 6, 2, 3), (4, 5, 6), (2, 3))


def test_broker_registration_round_trip_and_kafka_v4() -> None:
    broker = BrokerRegistration(
        7,
        (
            BrokerEndpoint("INTERNAL", "10.0.0.7", 9093, "SSL"),
            BrokerEndpoint("EXTERNAL", "::1", 9092, "PLAINTEXT"),
        ),
        rack="eu-1a",
    )
    data = znodes.encode_broker(broker)
    obj = json.loads(data)
    assert obj["endpoints"] == ["INTERNAL://10.0.0.7:9093", "EXTERNAL://[::1]:9092"]
    assert (obj["host"], obj["port"]) == ("::1", 9092)
    assert znodes.decode_broker(7, data) == broker
    kafka_v4 = (
        b'{"listener_security_protocol_map":{"PLAINTEXT":"PLAINTEXT"},'
        b'"endpoints":["PLAINTEXT://kafka1:9092"],"jmx_port":-1,"host":"kafka1",'
        b'"timestamp":"1700000000000","port":9092,"version":4}'
    )
    assert znodes.decode_broker(1, kafka_v4) == BrokerRegistration(
        1, (BrokerEndpoint("PLAINTEXT", "kafka1", 9092),)
    )
    with pytest.raises(ZNodeDataError, match="LISTENER://host:port"):
        znodes.decode_broker(1, b'{"version":4,"endpoints":["nonsense"],"jmx_port":-1}')


def test_controller_and_epoch() -> None:
    obj = json.loads(znodes.encode_controller(3))
    assert (obj["version"], obj["brokerid"], obj["timestamp"].isdigit()) == (2, 3, True)
    assert znodes.decode_controller(b'{"version":1,"brokerid":2,"timestamp":"1"}') == 2
    assert znodes.encode_controller_epoch(12) == b"12"
    assert znodes.decode_controller_epoch(b"12") == 12
    with pytest.raises(ZNodeDataError):
        znodes.decode_controller_epoch(b"twelve")


def test_notifications_and_admin_znodes() -> None:
    partitions = [TopicPartition("b", 1), TopicPartition("a", 0)]
    data = znodes.encode_isr_change(partitions)
    assert json.loads(data) == {
        "version": 1,
        "partitions": [{"topic": "a", "partition": 0}, {"topic": "b", "partition": 1}],
    }
    assert znodes.decode_isr_change("/x", data) == set(partitions)
    assert znodes.decode_preferred_election(znodes.encode_preferred_election(partitions)) == set(
        partitions
    )
    reassignment = {TopicPartition("a", 0): (3, 4)}
    assert json.loads(znodes.encode_reassignment(reassignment)) == {
        "version": 1,
        "partitions": [{"topic": "a", "partition": 0, "replicas": [3, 4]}],
    }
    assert znodes.decode_reassignment(znodes.encode_reassignment(reassignment)) == reassignment
    assert json.loads(znodes.encode_config_change("topics/a")) == {
        "version": 2,
        "entity_path": "topics/a",
    }
    assert znodes.decode_config_change("/c", znodes.encode_config_change("brokers/<default>")) == (
        "brokers",
        "<default>",
    )
    old = b'{"version":1,"entity_type":"topics","entity_name":"a"}'
    assert znodes.decode_config_change("/c", old) == ("topics", "a")
    assert znodes.decode_entity_config("/p", b'{"version":1,"config":{"a":"1"}}') == {"a": "1"}
    assert znodes.sequence_number("isr_change_0000000042", znodes.ISR_CHANGE_PREFIX) == (
        "0000000042"
    )


def test_producer_id_block() -> None:
    block = ProducerIdBlock(broker_id=2, first_producer_id=5000)
    data = znodes.encode_producer_id_block(block)
    assert json.loads(data) == {
        "version": 1,
        "broker": 2,
        "block_start": "5000",
        "block_end": "5999",
    }
    assert znodes.decode_producer_id_block(data) == block
    assert block.next_block_first_id == 6000
    with pytest.raises(ZNodeDataError, match="before block_start"):
        znodes.decode_producer_id_block(
            b'{"version":1,"broker":1,"block_start":"10","block_end":"5"}'
        )


def test_topic_ids_use_kafkas_text_form() -> None:
    zero = uuid.UUID(int=0)
    assert znodes.topic_id_to_text(zero) == "AAAAAAAAAAAAAAAAAAAAAA"
    for _ in range(100):
        topic_id = znodes.new_topic_id()
        text = znodes.topic_id_to_text(topic_id)
        assert len(text) == 22 and not text.startswith("-")
        assert znodes.topic_id_from_text(text) == topic_id
    with pytest.raises(ZNodeDataError):
        znodes.topic_id_from_text("short")
    cluster_id = znodes.new_cluster_id()
    assert len(cluster_id) == 22
    assert json.loads(znodes.encode_cluster_id(cluster_id)) == {"version": "1", "id": cluster_id}
