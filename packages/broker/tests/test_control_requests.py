"""The controller's requests read the same at every version, and the answers take the
shape of the request's version (each request goes through the wire format first)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from gregor.broker import control_requests as control
from gregor.protocol import framing
from gregor.protocol.apis import leader_and_isr as lai
from gregor.protocol.apis import stop_replica as sr
from gregor.protocol.schema import Request, Response

ORDERS = uuid.UUID(int=7)


def through_the_wire(request: Request, version: int) -> Any:
    _, decoded = framing.decode_request(
        framing.encode_request(request, version, 1, "controller")[4:]
    )
    return decoded


def answer_through_the_wire(response: Response, version: int) -> Any:
    _, decoded = framing.decode_response(
        framing.encode_response(response, version, 1)[4:], response.api_key, version
    )
    return decoded


def state(topic: str, partition: int) -> lai.LeaderAndIsrPartitionState:
    return lai.LeaderAndIsrPartitionState(topic, partition, 1, 2, 3, [2, 1], 0, [2, 1])


@pytest.mark.parametrize("version", [0, 1, 2, 4, 5, 7])
def test_leader_and_isr_at_every_version(version: int) -> None:
    named = [("orders", 0), ("orders", 1), ("audit", 0)]
    if version < 2:
        request = lai.LeaderAndIsrRequest(
            ungrouped_partition_states=[state(t, p) for t, p in named]
        )
    else:
        request = lai.LeaderAndIsrRequest(
            topic_states=[
                lai.LeaderAndIsrTopicState("orders", ORDERS, [state("", 0), state("", 1)]),
                lai.LeaderAndIsrTopicState("audit", uuid.UUID(int=9), [state("", 0)]),
            ]
        )
    decoded = through_the_wire(request, version)
    seen = [
        (topic, s.partition_index, s.leader, s.isr)
        for topic, s in control.partition_states(decoded)
    ]
    assert seen == [(t, p, 2, [2, 1]) for t, p in named]
    errors = {("orders", 0): 0, ("orders", 1): 75, ("audit", 0): 0}
    ids = {t.topic_name: t.topic_id for t in decoded.topic_states}
    response = answer_through_the_wire(
        control.leader_and_isr_response(version, errors, ids), version
    )
    assert isinstance(response, lai.LeaderAndIsrResponse)
    if version < 5:
        flat = [(e.topic_name, e.partition_index, e.error_code) for e in response.partition_errors]
        assert flat == [("orders", 0, 0), ("orders", 1, 75), ("audit", 0, 0)]
    else:
        by_id = {
            t.topic_id: [(e.partition_index, e.error_code) for e in t.partition_errors]
            for t in response.topics
        }
        assert by_id == {ORDERS: [(0, 0), (1, 75)], uuid.UUID(int=9): [(0, 0)]}


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_stop_replica_at_every_version(version: int) -> None:
    if version == 0:
        request = sr.StopReplicaRequest(
            delete_partitions=True,
            ungrouped_partitions=[sr.StopReplicaPartitionV0("orders", p) for p in (0, 1)],
        )
    elif version < 3:
        request = sr.StopReplicaRequest(
            delete_partitions=True, topics=[sr.StopReplicaTopicV1("orders", [0, 1])]
        )
    else:
        request = sr.StopReplicaRequest(
            topic_states=[
                sr.StopReplicaTopicState(
                    "orders",
                    [
                        sr.StopReplicaPartitionState(0, 4, True),
                        sr.StopReplicaPartitionState(1, 4, True),
                    ],
                )
            ]
        )
    decoded = through_the_wire(request, version)
    epoch = 4 if version >= 3 else -1  # no leader epoch before v3
    assert list(control.stop_replica_states(decoded)) == [
        ("orders", 0, epoch, True),
        ("orders", 1, epoch, True),
    ]
    response = answer_through_the_wire(
        control.stop_replica_response([(("orders", 0), 0), (("orders", 1), 52)]), version
    )
    assert isinstance(response, sr.StopReplicaResponse)
    assert [(e.topic_name, e.partition_index, e.error_code) for e in response.partition_errors] == [
        ("orders", 0, 0),
        ("orders", 1, 52),
    ]
