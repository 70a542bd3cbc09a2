"""Each broker serves its metrics to Prometheus (metrics.prometheus.listener): scraped with
prometheus_client's own parser, the per-topic counters move by exactly what the test
produced and consumed, and the cluster-wide gauges add up (one active controller)."""

from __future__ import annotations

from collections.abc import Iterator

import confluent_kafka
import pytest

from gregor.devcluster import LocalCluster
from gregor.protocol.records import iter_batches
from gregor_testing.cluster import (
    WireClient,
    cluster_fixture,
    consumer_fetch,
    create_topic,
    leader_of,
    unique_topic,
)
from gregor_testing.prometheus import scrape, value

RECORDS = 1000
VALUE = b"m" * 300

metrics_cluster = cluster_fixture(
    "metrics_cluster", "module", {"metrics.prometheus.listener": "http://127.0.0.1:0"}
)


@pytest.fixture
def topic(metrics_cluster: LocalCluster) -> Iterator[str]:
    name = unique_topic("scraped")
    create_topic(metrics_cluster, name, 1, 3)
    yield name


def test_counters_move_by_exactly_what_was_produced_and_consumed(
    metrics_cluster: LocalCluster, topic: str
) -> None:
    before = {b.broker_id: scrape(b) for b in metrics_cluster.brokers}
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": metrics_cluster.bootstrap_servers, "acks": "all", "linger.ms": 5}
    )
    for i in range(RECORDS):
        producer.produce(topic, VALUE, key=str(i).encode())
    assert producer.flush(30) == 0

    # Consume it all once, by raw fetches from the leader: the bytes each answer carried.
    leader = leader_of(metrics_cluster, topic, 0)
    consumed_bytes, offset, fetches_sent = 0, 0, 0
    with WireClient(leader) as client:
        while offset < RECORDS:
            fetches_sent += 1
            request = consumer_fetch(topic, offset, partition_max_bytes=64 << 10)
            (partition,) = client.request(request, 11).responses[0].partitions
            records = bytes(partition.records or b"")
            consumed_bytes += len(records)
            for batch in iter_batches(records):
                offset = batch.header.next_offset

    after = {b.broker_id: scrape(b) for b in metrics_cluster.brokers}

    def moved(name: str, broker: int) -> float:
        return value(after[broker], name, topic=topic) - value(before[broker], name, topic=topic)

    ids = [b.broker_id for b in metrics_cluster.brokers]
    # Only the leader counts appends from producers and bytes to consumers (followers'
    # replication is not "in" or "out"), each exactly once.
    messages_in = {i: moved("kafka_server_brokertopicmetrics_messagesin_total", i) for i in ids}
    bytes_in = {i: moved("kafka_server_brokertopicmetrics_bytesin_total", i) for i in ids}
    bytes_out = {i: moved("kafka_server_brokertopicmetrics_bytesout_total", i) for i in ids}
    assert messages_in == {i: RECORDS if i == leader.broker_id else 0 for i in ids}
    # Everything appended was consumed once: the log's bytes both ways.
    assert bytes_out == {i: consumed_bytes if i == leader.broker_id else 0 for i in ids}
    assert bytes_in == bytes_out
    # The broker-wide counters moved at least as much (other topics may have moved too).
    grew = value(after[leader.broker_id], "kafka_server_brokertopicmetrics_messagesin_total")
    assert (
        grew - value(before[leader.broker_id], "kafka_server_brokertopicmetrics_messagesin_total")
        >= RECORDS
    )

    leader_after = after[leader.broker_id]
    fetches = value(leader_after, "kafka_network_requestmetrics_requests_total", request="Fetch")
    histogram = value(
        leader_after, "kafka_network_requestmetrics_totaltimems_count", request="Fetch"
    )
    assert fetches == histogram > 0
    assert (
        value(
            leader_after,
            "kafka_network_requestmetrics_totaltimems_bucket",
            request="Fetch",
            le="+Inf",
        )
        == histogram
    )

    # As Kafka's RequestChannel: each Fetch counts also as FetchConsumer or FetchFollower.
    # The leader answered exactly this test's fetches from a consumer, and its followers'.
    def requests(broker: int, request: str) -> float:
        name = "kafka_network_requestmetrics_requests_total"
        return value(after[broker], name, request=request) - value(
            before[broker], name, request=request
        )

    assert requests(leader.broker_id, "FetchConsumer") == fetches_sent
    assert requests(leader.broker_id, "FetchFollower") > 0
    for i in ids:
        split = requests(i, "FetchConsumer") + requests(i, "FetchFollower")
        assert requests(i, "Fetch") == split

    # Cluster-wide: one active controller, nothing offline or under-replicated.
    assert (
        sum(value(after[i], "kafka_controller_kafkacontroller_activecontrollercount") for i in ids)
        == 1
    )
    assert (
        sum(value(after[i], "kafka_controller_kafkacontroller_offlinepartitionscount") for i in ids)
        == 0
    )
    assert (
        sum(value(after[i], "kafka_server_replicamanager_underreplicatedpartitions") for i in ids)
        == 0
    )
    assert (
        "kafka_server_delayedoperationpurgatory_purgatorysize",
        frozenset({("delayedOperation", "Produce")}),
    ) in leader_after
