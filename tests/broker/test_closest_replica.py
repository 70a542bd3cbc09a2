"""Fetch from the closest replica (KIP-392): brokers in racks a, b and c with Kafka's
RackAwareReplicaSelector; a consumer with client.rack=b reads every record from the broker
in rack b (its per-topic bytes-out counter says so, the leader's stays at zero; and the
per-client fetch byte counters, which a generous default quota turns on as in Kafka, count
that client's bytes there), and when that broker dies it reads the rest from the leader.
For confluent-kafka and gregor-client, also read_committed over transactions, which the
follower serves from its own replicated producer state: up to its last stable offset, with
the aborted transactions named. And the wire-level answers: the leader's
preferred_read_replica without records, a follower serving a Fetch v11+ up to its high
watermark (its LSO read_committed), Kafka's errors."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager

import confluent_kafka
import pytest

from gregor.client import AdminClient, Consumer
from gregor.client import TopicPartition as GregorTopicPartition
from gregor.client.admin import ClientQuotaEntity
from gregor.devcluster import BrokerProcess, LocalCluster
from gregor.protocol.apis.fetch import FetchPartition, FetchRequest, FetchTopic, PartitionData
from gregor.protocol.errors import ErrorCode
from gregor.protocol.records import iter_batches
from gregor_testing.cluster import WireClient, create_topic, partitions_of, unique_topic, wait_for
from gregor_testing.prometheus import scrape, value
from gregor_testing.transactions import Transactions, values

RACK_AWARE = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
RECORDS = 400
LEADER, NEAREST = 0, 1  # broker 0 (rack a) leads; broker 1 is in the consumer's rack b
BYTES_IN = "kafka_server_brokertopicmetrics_bytesin_total"
BYTES_OUT = "kafka_server_brokertopicmetrics_bytesout_total"
REQUESTS = "kafka_network_requestmetrics_requests_total"
CLIENT_BYTES = "kafka_server_fetch_bytes_total"
READER = "rack-b-reader"  # the readers' client.id

# read(n): the next n values the consumer reads, in order (fewer if it times out).
Reader = Callable[[int], list[bytes]]


def racked_cluster(factory: Callable[..., LocalCluster]) -> LocalCluster:
    return factory(
        3,
        racks=["a", "b", "c"],
        replica_selector_class=RACK_AWARE,
        metrics_prometheus_listener="http://127.0.0.1:0",
        replica_lag_time_max_ms=3000,  # the dead replica leaves the ISR soon
    )


def racked_topic(factory: Callable[..., LocalCluster], prefix: str) -> tuple[LocalCluster, str]:
    """A racked cluster and a topic of one partition led in rack a, replicated in b and c."""
    cluster = racked_cluster(factory)
    topic = unique_topic(prefix)
    create_topic(cluster, topic, assignment={0: [LEADER, NEAREST, 2]})
    return cluster, topic


def produce(cluster: LocalCluster, topic: str, first: int, count: int) -> None:
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": cluster.bootstrap_servers, "acks": "all", "linger.ms": 5}
    )
    for i in range(first, first + count):
        producer.produce(topic, b"v%d" % i, partition=0)
    assert producer.flush(120) == 0


def bytes_moved(cluster: LocalCluster, name: str, topic: str) -> dict[int, float]:
    return {
        b.broker_id: value(scrape(b), name, topic=topic) for b in cluster.brokers if b.is_running()
    }


def bytes_sent_to(cluster: LocalCluster, client_id: str) -> dict[int, float]:
    """Each broker's Fetch bytes counted for the client (the per-client byte counters)."""
    return {
        b.broker_id: value(scrape(b), CLIENT_BYTES, user="", client_id=client_id)
        for b in cluster.brokers
        if b.is_running()
    }


def count_client_bytes(cluster: LocalCluster, topic: str) -> None:
    """A default consumer quota no client comes near, so that every broker counts each
    client's Fetch bytes (Kafka keeps its per-client byte-rate only under a quota); returns
    once each broker has counted a fetch of this test's wire client."""
    with AdminClient({"bootstrap.servers": cluster.bootstrap_servers}) as admin:
        admin.alter_client_quotas(
            {ClientQuotaEntity({"client-id": None}): {"consumer_byte_rate": 1e12}}
        )
    for broker in cluster.brokers:
        with WireClient(broker) as client:

            def counted(c: WireClient = client, b: BrokerProcess = broker) -> bool:
                fetch(c, topic, 0)
                return value(scrape(b), CLIENT_BYTES, user="", client_id="wire-test") > 0

            wait_for(counted, 30, f"broker {broker.broker_id} to count bytes per client")


@contextmanager
def confluent_reader(
    cluster: LocalCluster, topic: str, isolation: str = "read_uncommitted"
) -> Iterator[Reader]:
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "group.id": unique_topic("rack-b"),
            "client.id": READER,
            "client.rack": "b",
            "enable.auto.commit": False,
            "isolation.level": isolation,
        }
    )
    consumer.assign([confluent_kafka.TopicPartition(topic, 0, confluent_kafka.OFFSET_BEGINNING)])

    def read(n: int) -> list[bytes]:
        got: list[bytes] = []
        deadline = time.monotonic() + 90
        while len(got) < n and time.monotonic() < deadline:
            for message in consumer.consume(n - len(got), timeout=1):
                assert message.error() is None, message.error()
                got.append(message.value())
        return got

    try:
        yield read
    finally:
        consumer.close()


@contextmanager
def gregor_reader(
    cluster: LocalCluster, topic: str, isolation: str = "read_uncommitted"
) -> Iterator[Reader]:
    with Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "client.id": READER,
            "client.rack": "b",
            "auto.offset.reset": "earliest",
            "isolation.level": isolation,
        }
    ) as consumer:
        consumer.assign([GregorTopicPartition(topic, 0)])

        def read(n: int) -> list[bytes]:
            got: list[bytes] = []
            deadline = time.monotonic() + 90
            while len(got) < n and time.monotonic() < deadline:
                got += [r.value or b"" for r in consumer.consume(n - len(got), timeout=1)]
            return got

        yield read


@pytest.mark.parametrize("reader", [confluent_reader, gregor_reader], ids=["confluent", "gregor"])
def test_a_consumer_reads_from_its_rack_and_falls_back_to_the_leader(
    cluster_factory: Callable[..., LocalCluster],
    reader: Callable[[LocalCluster, str], AbstractContextManager[Reader]],
) -> None:
    cluster, topic = racked_topic(cluster_factory, "closest")
    produce(cluster, topic, 0, RECORDS)
    count_client_bytes(cluster, topic)
    before = bytes_moved(cluster, BYTES_OUT, topic)  # the wire client's probes
    with reader(cluster, topic) as read:
        assert read(RECORDS) == [b"v%d" % i for i in range(RECORDS)]
        appended = bytes_moved(cluster, BYTES_IN, topic)[LEADER]
        # Every byte went out of the broker in rack b, once; none from the others.
        wait_for(
            lambda: (
                bytes_moved(cluster, BYTES_OUT, topic)
                == {0: before[0], 1: before[1] + appended, 2: before[2]}
            ),
            30,
            f"the rack-b broker to have sent all {appended} bytes",
        )
        # And to this client: the records from rack b; from the leader, answers naming b.
        sent = bytes_sent_to(cluster, READER)
        assert sent[NEAREST] >= appended and sent[2] == 0
        assert sent[LEADER] < appended / 10  # (79 bytes measured: one answer)

        cluster.broker(NEAREST).kill()
        produce(cluster, topic, RECORDS, RECORDS)
        assert read(RECORDS) == [b"v%d" % i for i in range(RECORDS, 2 * RECORDS)]
    out = bytes_moved(cluster, BYTES_OUT, topic)
    assert out[LEADER] > before[LEADER] and out[2] == before[2]
    # The records appended since, to this client from the leader.
    later = bytes_moved(cluster, BYTES_IN, topic)[LEADER] - appended
    fallback = bytes_sent_to(cluster, READER)
    assert fallback[LEADER] - sent[LEADER] >= later and fallback[2] == 0


def test_gregor_client_reads_the_leader_while_the_replica_it_named_is_dead(
    cluster_factory: Callable[..., LocalCluster],
) -> None:
    """Until the dead rack-b replica leaves the ISR, the leader keeps naming it. gregor-client
    shuns it meanwhile (its requests carry no rack, so the leader serves them): a handful of
    long polls, where asking again at once was a busy loop of empty answers."""
    cluster, topic = racked_topic(cluster_factory, "closest-shun")
    produce(cluster, topic, 0, RECORDS)
    leader = cluster.broker(LEADER)

    def fetches() -> float:
        return value(scrape(leader), REQUESTS, request="Fetch")

    with gregor_reader(cluster, topic) as read:
        assert read(RECORDS) == [b"v%d" % i for i in range(RECORDS)]
        before = fetches()
        cluster.broker(NEAREST).kill()
        produce(cluster, topic, RECORDS, RECORDS)
        assert read(RECORDS) == [b"v%d" % i for i in range(RECORDS, 2 * RECORDS)]
        wait_for(
            lambda: sorted(partitions_of(cluster, topic, LEADER)[0].isr_nodes) == [LEADER, 2],
            30,
            "the dead replica to leave the ISR",
        )
        asked = fetches() - before
    # replica.lag.time.max.ms is 3 s: the consumer's long polls (fetch.max.wait.ms 500),
    # broker 2's and a probe of the dead replica a second make a few dozen.
    assert asked < 200, f"{asked:.0f} Fetch requests at the leader while the replica was dead"


def fetch(
    client: WireClient, topic: str, offset: int, version: int = 11, isolation_level: int = 0
) -> PartitionData:
    request = FetchRequest(
        replica_id=-1,
        max_wait_ms=0,
        min_bytes=1,
        max_bytes=1 << 20,
        isolation_level=isolation_level,
        rack_id="b",
        topics=[
            FetchTopic(
                topic=topic,
                partitions=[
                    FetchPartition(partition=0, fetch_offset=offset, partition_max_bytes=1 << 20)
                ],
            )
        ],
    )
    (partition,) = client.request(request, version).responses[0].partitions
    assert isinstance(partition, PartitionData)
    return partition


def test_the_wire_answers_of_leaders_and_followers(
    cluster_factory: Callable[..., LocalCluster],
) -> None:
    cluster, topic = racked_topic(cluster_factory, "closest-wire")
    produce(cluster, topic, 0, RECORDS)
    with WireClient(cluster.broker(LEADER)) as leader:
        # The leader names the rack-b replica and sends no records; Fetch v10 (no rack)
        # gets the records.
        named = fetch(leader, topic, 0)
        assert named.error_code == ErrorCode.NONE and named.preferred_read_replica == NEAREST
        assert not named.records and named.high_watermark == RECORDS
        old = fetch(leader, topic, 0, version=10)
        assert old.preferred_read_replica == -1 and old.records
    with WireClient(cluster.broker(NEAREST)) as follower:
        # The follower serves up to its high watermark (the leader's, once replicated).
        def replicated() -> bool:
            return fetch(follower, topic, 0).high_watermark == RECORDS

        wait_for(replicated, 30, "the follower's high watermark")
        offset, values = 0, []
        while offset < RECORDS:
            data = fetch(follower, topic, offset)
            assert data.error_code == ErrorCode.NONE and data.preferred_read_replica == -1
            for batch in iter_batches(bytes(data.records)):
                values += [r.value for r in batch.records()]
                offset = batch.header.next_offset
        assert values == [b"v%d" % i for i in range(RECORDS)]
        at_end = fetch(follower, topic, RECORDS)
        assert at_end.error_code == ErrorCode.NONE and not at_end.records
        beyond = fetch(follower, topic, RECORDS + 1)
        assert beyond.error_code == ErrorCode.OFFSET_OUT_OF_RANGE
        # Before v11 a consumer reads leaders only.
        refused = fetch(follower, topic, 0, version=10)
        assert refused.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER


@pytest.mark.parametrize("reader", [confluent_reader, gregor_reader], ids=["confluent", "gregor"])
def test_a_read_committed_consumer_reads_only_committed_records_from_its_rack(
    cluster_factory: Callable[..., LocalCluster],
    reader: Callable[..., AbstractContextManager[Reader]],
) -> None:
    cluster, topic = racked_topic(cluster_factory, "closest-txn")
    txns = Transactions(cluster, topic)
    first, aborted, second, opened = (
        values("c", 60),
        values("a", 40),
        values("d", 60),
        values("o", 30),
    )
    txns.write(first, "commit")
    txns.write(aborted, "abort")
    txns.write(second, "commit")
    txns.write(opened, None)
    with reader(cluster, topic, "read_committed") as read:
        # The aborted records never show; the open transaction holds the rest back.
        assert read(len(first) + len(second)) == first + second
        txns.producer.commit_transaction(60)
        assert read(len(opened)) == opened
        # Nothing came from the leader or the third broker: the follower in rack b served it
        # all, aborted records and control batches included.
        appended = bytes_moved(cluster, BYTES_IN, topic)[LEADER]
        wait_for(
            lambda: bytes_moved(cluster, BYTES_OUT, topic) == {0: 0, 1: appended, 2: 0},
            30,
            f"the rack-b broker to have sent all {appended} bytes",
        )


def test_a_follower_answers_read_committed_up_to_its_last_stable_offset(
    cluster_factory: Callable[..., LocalCluster],
) -> None:
    cluster, topic = racked_topic(cluster_factory, "closest-lso")
    txns = Transactions(cluster, topic)
    txns.write(values("c", 10), "commit")  # offsets 0-9, its marker 10
    txns.write(values("a", 5), "abort")  # 11-15, marker 16
    txns.write(values("o", 5), None)  # 17-21, open
    with WireClient(cluster.broker(LEADER)) as leader:
        at_leader = fetch(leader, topic, 0, version=10, isolation_level=1)
    assert (at_leader.high_watermark, at_leader.last_stable_offset) == (22, 17)
    [aborted] = at_leader.aborted_transactions
    assert aborted.first_offset == 11
    with WireClient(cluster.broker(NEAREST)) as follower:
        wait_for(
            lambda: fetch(follower, topic, 0).high_watermark == 22,
            30,
            "the follower's high watermark",
        )
        committed = fetch(follower, topic, 0, isolation_level=1)
        assert committed.error_code == ErrorCode.NONE
        assert (committed.high_watermark, committed.last_stable_offset) == (22, 17)
        assert [(a.producer_id, a.first_offset) for a in committed.aborted_transactions] == [
            (aborted.producer_id, 11)
        ]
        batches = list(iter_batches(bytes(committed.records)))
        # Records stop at the LSO: the open transaction's batch is not sent.
        assert batches[-1].header.next_offset == 17
        assert [b.header.is_control for b in batches] == [False, True, False, True]
        uncommitted = fetch(follower, topic, 0)
        assert list(iter_batches(bytes(uncommitted.records)))[-1].header.next_offset == 22

        txns.producer.commit_transaction(60)
        wait_for(
            lambda: fetch(follower, topic, 17, isolation_level=1).last_stable_offset == 23,
            30,
            "the follower's LSO to pass the committed transaction",
        )
        after = fetch(follower, topic, 17, isolation_level=1)
        assert after.aborted_transactions == []
        batches = list(iter_batches(bytes(after.records)))
        assert [b.header.is_control for b in batches] == [False, True]
        assert [r.value for r in batches[0].records()] == values("o", 5)
