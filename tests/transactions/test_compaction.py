"""Transactions on a compacted topic, cleaned by the brokers' own log cleaner (seed 000
section 4.8, as Kafka's LogCleaner does it): the records of an aborted transaction are
removed, and a transaction's marker stays on every replica as long as any of its data
does (else read_committed could no longer tell aborted records from committed ones), and
goes once its data is cleaned away and its producer expired.

Each replica's segment files are read directly while the cleaners run: the invariant is
checked on every look, not only at the end.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from confluent_kafka import Producer
from transactions.helpers import read_all

from gregor.devcluster import BrokerProcess, LocalCluster, wait_until
from gregor.protocol.records import ControlType, iter_batches
from gregor_testing.cluster import create_topic, unique_topic

PROPERTIES = {
    "transaction.state.log.num.partitions": "3",
    "log.cleaner.backoff.ms": "200",
    "producer.id.expiration.ms": "3000",
    "producer.id.expiration.check.interval.ms": "500",
}
COMPACTED = {
    "cleanup.policy": "compact",
    "segment.ms": "100",
    "min.cleanable.dirty.ratio": "0.01",
    "delete.retention.ms": "0",
    "min.compaction.lag.ms": "0",
}


def on_disk(broker: BrokerProcess, topic: str) -> tuple[set[bytes], set[ControlType]]:
    """The values of the data records, and the kinds of the transaction markers, in a
    replica's segment files (a file swapped away meanwhile is read again)."""
    directory = Path(broker.data_dir) / f"{topic}-0"
    while True:
        try:
            data = b"".join(p.read_bytes() for p in sorted(directory.glob("*.log")))
            break
        except FileNotFoundError:
            continue
    values: set[bytes] = set()
    markers: set[ControlType] = set()
    for batch in iter_batches(data):
        if batch.header.is_control:
            markers.add(batch.control_record().type)
        else:
            values.update(r.value for r in batch if r.value is not None)
    return values, markers


class Replicas:
    """Looks at every replica, asserting on each look that no transaction's data outlives
    its marker."""

    def __init__(self, cluster: LocalCluster, topic: str) -> None:
        self.cluster = cluster
        self.topic = topic
        self.looks = 0

    def all(
        self, holds: Callable[[set[bytes], set[ControlType]], bool], checked: bool = True
    ) -> bool:
        found = [on_disk(b, self.topic) for b in self.cluster.brokers]
        self.looks += checked
        for values, markers in found if checked else ():
            if b"aborted" in values:
                assert ControlType.ABORT in markers, "aborted data outlived its marker"
            if b"old" in values:
                assert ControlType.COMMIT in markers, "committed data outlived its marker"
        return all(holds(values, markers) for values, markers in found)


def fill(cluster: LocalCluster, topic: str, round_: int) -> None:
    """Plain records of keys of their own: dirty data, so the cleaners run again."""
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"})
    for i in range(20):
        producer.produce(topic, b"f", f"filler-{round_}-{i}".encode(), partition=0)
    assert producer.flush(30) == 0


def test_cleaning_removes_aborted_records_and_keeps_markers_while_their_data_lives(
    cluster_factory: Callable[..., LocalCluster],
) -> None:
    cluster = cluster_factory(3, **PROPERTIES)
    topic = unique_topic("txn-compacted")
    create_topic(cluster, topic, partitions=1, replication_factor=3, configs=COMPACTED)
    producer = Producer(
        {"bootstrap.servers": cluster.bootstrap_servers, "transactional.id": unique_topic("tid")}
    )
    producer.init_transactions(60)
    producer.begin_transaction()
    producer.produce(topic, b"old", b"committed-key", partition=0)
    producer.commit_transaction(60)
    producer.begin_transaction()
    producer.produce(topic, b"aborted", b"aborted-key", partition=0)
    assert producer.flush(30) == 0
    producer.abort_transaction(60)
    del producer  # its producer id expires (producer.id.expiration.ms)
    replicas = Replicas(cluster, topic)
    rounds = iter(range(10**6))

    def cleaned(holds: Callable[[set[bytes], set[ControlType]], bool]) -> Callable[[], bool]:
        def check() -> bool:
            if replicas.all(holds):
                return True
            fill(cluster, topic, next(rounds))
            return False

        return check

    # abort_transaction returns once PrepareAbort is written: the markers come after.
    wait_until(
        lambda: replicas.all(lambda _values, markers: len(markers) == 2, checked=False),
        60,
        "both markers on every replica",
        interval=0.2,
    )
    # The aborted record goes; the committed one stays, and with it its COMMIT marker.
    wait_until(
        cleaned(lambda values, _markers: b"aborted" not in values),
        90,
        "the aborted record gone",
        interval=0.5,
    )
    assert replicas.all(lambda values, markers: b"old" in values and ControlType.COMMIT in markers)
    committed = read_all(cluster, topic, 1, "read_committed")[0]
    assert b"old" in committed and b"aborted" not in committed
    # Overwritten outside the transaction, its data is cleaned away, then its marker too.
    plain = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"})
    plain.produce(topic, b"new", b"committed-key", partition=0)
    assert plain.flush(30) == 0
    wait_until(
        cleaned(lambda values, markers: b"old" not in values and not markers),
        90,
        "the committed record and every marker gone",
        interval=0.5,
    )
    committed = read_all(cluster, topic, 1, "read_committed")[0]
    assert b"new" in committed and b"old" not in committed and b"aborted" not in committed
    assert replicas.looks > 2
