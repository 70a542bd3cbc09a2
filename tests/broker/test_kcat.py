"""kcat (librdkafka's command-line client) against a real three-broker cluster, with
Debian's librdkafka and (`new`) with the current one that confluent-kafka bundles."""

from __future__ import annotations

import json
import shutil

import pytest

from gregor.devcluster import LocalCluster
from gregor_testing.cluster import create_topic, unique_topic
from gregor_testing.matrix import run_kcat

pytestmark = pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed")

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def kcat(cluster: LocalCluster, *args: str, stdin: bytes | None = None, new: bool = False) -> str:
    return run_kcat(cluster.bootstrap_servers, *args, new=new, stdin=stdin).decode()


def test_list_shows_brokers_topics_and_leaders(shared_cluster: LocalCluster) -> None:
    topic = unique_topic("listed")
    assignment = create_topic(shared_cluster, topic, partitions=3, replication_factor=3)
    listing = kcat(shared_cluster, "-L", "-t", topic)
    for broker in shared_cluster.brokers:
        assert f"broker {broker.broker_id} at {broker.address}" in listing
    assert f'topic "{topic}" with 3 partitions' in listing
    for partition, replicas in assignment.items():
        expected = ",".join(map(str, replicas))
        assert (
            f"partition {partition}, leader {replicas[0]}, replicas: {expected}, isrs: " in listing
        )


@pytest.mark.parametrize(
    "new",
    [
        pytest.param(False, marks=pytest.mark.interop("kcat", "fetch"), id="kcat"),
        pytest.param(True, marks=pytest.mark.interop("kcat-new", "fetch"), id="kcat-new"),
    ],
)
@pytest.mark.parametrize("codec", CODECS)
def test_produce_and_consume_with_every_codec(
    shared_cluster: LocalCluster, codec: str, new: bool
) -> None:
    topic = unique_topic(f"kcat-{codec}")
    create_topic(shared_cluster, topic, partitions=1, replication_factor=3)
    values = [f"{codec}-record-{i}-" + "x" * (i % 50) for i in range(500)]
    kcat(
        shared_cluster,
        "-P",
        "-t",
        topic,
        "-p",
        "0",
        "-z",
        codec,
        "-K",
        ":",
        "-X",
        "acks=all",
        stdin="".join(f"key{i}:{v}\n" for i, v in enumerate(values)).encode(),
        new=new,
    )
    out = kcat(shared_cluster, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-e",
               "-f", "%o|%k|%s\n", new=new)  # fmt: skip
    lines = out.splitlines()
    assert lines == [f"{i}|key{i}|{v}" for i, v in enumerate(values)]
    # From an offset inside a batch.
    tail = kcat(shared_cluster, "-C", "-t", topic, "-p", "0", "-o", "321", "-e", "-f", "%o|%s\n",
                new=new)  # fmt: skip
    assert tail.splitlines() == [f"{i}|{v}" for i, v in enumerate(values) if i >= 321]


@pytest.mark.parametrize(
    "new",
    [
        pytest.param(False, marks=pytest.mark.interop("kcat", "fetch"), id="kcat"),
        pytest.param(True, marks=pytest.mark.interop("kcat-new", "fetch"), id="kcat-new"),
    ],
)
def test_query_offsets_for_times(shared_cluster: LocalCluster, new: bool) -> None:
    """kcat -Q asks ListOffsets for the first offset at or after a timestamp, and for the
    ends of the log with Kafka's sentinels (-1 latest, -2 earliest)."""
    from confluent_kafka import Producer

    topic = unique_topic("kcat-times")
    create_topic(shared_cluster, topic, partitions=2, replication_factor=3)
    producer = Producer({"bootstrap.servers": shared_cluster.bootstrap_servers, "acks": "all"})
    base = 1_700_000_000_000
    for partition in (0, 1):
        for i in range(10):  # partition 1's timestamps are 5 s later than partition 0's
            producer.produce(
                topic, b"v", partition=partition, timestamp=base + partition * 5000 + i * 1000
            )
    assert producer.flush(30) == 0
    # kcat takes a partition once per call, so one call per question.
    for partition, timestamp, offset in [
        (0, base + 2500, 3),  # between records: the first one after it
        (0, base + 3000, 3),  # exactly a record's timestamp
        (1, base + 4000, 0),  # before the first record
        (1, base + 14_000, 9),
        (0, base + 60_000, -1),  # past the last record: Kafka answers -1
        (0, -1, 10),  # latest: the end offset
        (1, -2, 0),  # earliest
    ]:
        out = json.loads(kcat(shared_cluster, "-Q", "-J", "-t", f"{topic}:{partition}:{timestamp}",
                              new=new))  # fmt: skip
        assert out[topic][str(partition)] == {"partition": partition, "offset": offset}
