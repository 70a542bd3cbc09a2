"""What scripts do with a local cluster, over plain requests: create a topic through the
controller (as an admin client does), and produce and fetch back a sample."""

from __future__ import annotations

from collections.abc import Sequence

from gregor.devcluster.broker import BrokerProcess
from gregor.devcluster.cluster import LocalCluster
from gregor.devcluster.supervisor import wait_until
from gregor.devcluster.wire import send_request
from gregor.protocol.apis.create_topics import (
    CreatableReplicaAssignment,
    CreatableTopic,
    CreateTopicsRequest,
    CreateTopicsResponse,
)
from gregor.protocol.apis.fetch import FetchPartition, FetchRequest, FetchResponse, FetchTopic
from gregor.protocol.apis.metadata import MetadataRequest, MetadataRequestTopic, MetadataResponse
from gregor.protocol.apis.produce import (
    PartitionProduceData,
    ProduceRequest,
    ProduceResponse,
    TopicProduceData,
)
from gregor.protocol.errors import ErrorCode
from gregor.protocol.records import BatchBuilder, iter_batches


def metadata(broker: BrokerProcess, topics: list[str] | None) -> MetadataResponse:
    request = MetadataRequest(
        topics=None if topics is None else [MetadataRequestTopic(name=t) for t in topics]
    )
    response = send_request(broker.host, broker.port, request, 9)
    assert isinstance(response, MetadataResponse)
    return response


def controller(cluster: LocalCluster, timeout: float = 60.0) -> BrokerProcess:
    """The broker that is the controller, once the brokers know it."""
    found: list[BrokerProcess] = []

    def known() -> bool:
        response = metadata(cluster.brokers[0], [])
        if response.controller_id < 0 or len(response.brokers) < len(cluster.brokers):
            return False
        found.append(cluster.broker(response.controller_id))
        return True

    wait_until(known, timeout, "the brokers to elect a controller")
    return found[-1]


def create_topic(
    cluster: LocalCluster,
    name: str,
    partitions: int,
    replication_factor: int,
    assignment: Sequence[Sequence[int]] | None = None,
) -> None:
    """CreateTopics through the controller, as an admin client does; returns once every
    partition has a leader and a full ISR on every broker. `assignment` gives each
    partition's replicas (its first is the preferred leader), in place of the controller's
    round robin."""
    chosen = controller(cluster)
    if assignment is None:
        topic = CreatableTopic(name, partitions, replication_factor)
    else:
        replicas = [CreatableReplicaAssignment(p, list(r)) for p, r in enumerate(assignment)]
        topic = CreatableTopic(name, -1, -1, assignments=replicas)
    request = CreateTopicsRequest(topics=[topic], timeout_ms=30_000)
    response = send_request(chosen.host, chosen.port, request, 5, timeout=40)
    assert isinstance(response, CreateTopicsResponse)
    result = response.topics[0]
    if result.error_code not in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS):
        raise RuntimeError(f"cannot create topic {name}: {result.error_message}")

    def ready() -> bool:
        for broker in cluster.brokers:
            answer = metadata(broker, [name])
            parts = [p for t in answer.topics if t.error_code == 0 for p in t.partitions]
            if len(parts) != partitions or any(
                p.leader_id < 0 or len(p.isr_nodes) != replication_factor for p in parts
            ):
                return False
        return True

    wait_until(ready, 60, f"topic {name} to be ready on every broker")


def leader(cluster: LocalCluster, topic: str, partition: int) -> BrokerProcess:
    for p in metadata(cluster.brokers[0], [topic]).topics[0].partitions:
        if p.partition_index == partition and p.leader_id >= 0:
            return cluster.broker(p.leader_id)
    raise RuntimeError(f"{topic}-{partition} has no leader")


def produce_and_fetch_sample(
    cluster: LocalCluster, topic: str, count: int = 5
) -> list[tuple[int, bytes]]:
    """Produce `count` records to partition 0 (acks=all), then fetch them back."""
    led_by = leader(cluster, topic, 0)
    builder = BatchBuilder()
    for i in range(count):
        builder.append(f"hello from gregor #{i}".encode(), key=f"key-{i}".encode())
    produce = ProduceRequest(
        acks=-1,
        timeout_ms=30_000,
        topic_data=[TopicProduceData(topic, [PartitionProduceData(0, builder.build())])],
    )
    answer = send_request(led_by.host, led_by.port, produce, 9, timeout=40)
    assert isinstance(answer, ProduceResponse)
    result = answer.responses[0].partition_responses[0]
    if result.error_code != ErrorCode.NONE:
        raise RuntimeError(f"producing the sample failed with error {result.error_code}")
    wanted = FetchPartition(
        partition=0, fetch_offset=result.base_offset, partition_max_bytes=1 << 20
    )
    fetch = FetchRequest(
        max_wait_ms=1000, min_bytes=1, topics=[FetchTopic(topic=topic, partitions=[wanted])]
    )
    fetched = send_request(led_by.host, led_by.port, fetch, 11, timeout=10)
    assert isinstance(fetched, FetchResponse)
    records = fetched.responses[0].partitions[0].records
    assert isinstance(records, bytes | bytearray | memoryview)
    return [(r.offset, r.value or b"") for batch in iter_batches(records) for r in batch]
