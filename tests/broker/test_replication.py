"""Replication on real brokers: min.insync.replicas, acks=all timeouts, the leader's ISR
shrink and expansion through ZooKeeper, the checkpointed high watermark, and truncation by
leader epoch (a returning replica never keeps records the new leader does not have)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gregor.devcluster import BrokerProcess, LocalCluster
from gregor.protocol.apis.list_offsets import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
)
from gregor.protocol.apis.produce import PartitionProduceData, ProduceRequest, TopicProduceData
from gregor.protocol.errors import ErrorCode
from gregor.protocol.records import BatchBuilder
from gregor.storage.checkpoints import REPLICATION_CHECKPOINT, OffsetCheckpointFile
from gregor_testing.cluster import (
    WireClient,
    create_topic,
    partitions_of,
    unique_topic,
    wait_for,
)
from gregor_testing.processes import zookeeper_client

Factory = Callable[..., LocalCluster]


def produce(
    broker: BrokerProcess, topic: str, values: list[bytes], acks: int = -1, timeout_ms: int = 10_000
) -> Any:
    builder = BatchBuilder()
    for value in values:
        builder.append(value)
    request = ProduceRequest(
        acks=acks,
        timeout_ms=timeout_ms,
        topic_data=[TopicProduceData(topic, [PartitionProduceData(0, builder.build())])],
    )
    with WireClient(broker) as client:
        return client.request(request, 9).responses[0].partition_responses[0]


def list_offset(broker: BrokerProcess, topic: str, replica_id: int) -> int:
    """The latest offset, or -(error code) while the broker cannot answer."""
    with WireClient(broker) as client:
        request = ListOffsetsRequest(
            replica_id=replica_id,
            topics=[ListOffsetsTopic(topic, [ListOffsetsPartition(0, -1, -1)])],
        )
        answer = client.request(request, 7).topics[0].partitions[0]
    return int(answer.offset) if answer.error_code == ErrorCode.NONE else -answer.error_code


def high_watermark(broker: BrokerProcess, topic: str) -> int:
    """Any replica's high watermark (the debugging replica id may ask followers too)."""
    return list_offset(broker, topic, -2)


def end_offsets(leader: BrokerProcess, topic: str) -> tuple[int, int]:
    """(high watermark, log end offset) of partition 0 on its leader: a replica's
    ListOffsets reads to the log end."""
    return high_watermark(leader, topic), list_offset(leader, topic, 1000)


def zk_state(cluster: LocalCluster, topic: str) -> tuple[dict[str, Any], int]:
    with zookeeper_client(cluster.zookeeper_connect) as client:
        data, stat = client.get(f"/brokers/topics/{topic}/partitions/0/state")
    return json.loads(data), stat.version


def isr(cluster: LocalCluster, topic: str, broker_id: int = 0) -> list[int]:
    """Partition 0's ISR as a broker's metadata shows it ([] while it knows nothing)."""
    found = partitions_of(cluster, topic, broker_id).get(0)
    return sorted(found.isr_nodes) if found is not None else []


def leader_id(cluster: LocalCluster, topic: str, broker_id: int) -> int:
    found = partitions_of(cluster, topic, broker_id).get(0)
    return found.leader_id if found is not None else -1


def test_min_insync_replicas_and_acks_all_timeouts(cluster_factory: Factory) -> None:
    cluster = cluster_factory(3, replica_lag_time_max_ms=30_000)
    topic = unique_topic("min-isr")
    create_topic(
        cluster,
        topic,
        assignment={0: [0, 1, 2]},
        configs={"min.insync.replicas": "3"},
    )
    leader, follower = cluster.broker(0), cluster.broker(2)
    assert produce(leader, topic, [b"all three"]).error_code == ErrorCode.NONE
    follower.pause()
    try:
        # In the ISR but not fetching: the records are written, the ISR never has them.
        timed_out = produce(leader, topic, [b"unacknowledged"], timeout_ms=500)
        assert timed_out.error_code == ErrorCode.REQUEST_TIMED_OUT
        assert end_offsets(leader, topic) == (1, 2)
    finally:
        follower.resume()
    wait_for(lambda: end_offsets(leader, topic) == (2, 2), 30, "the follower to catch up")
    follower.kill()
    # The controller takes the dead broker out of the ISR: acks=all is refused from then
    # on (nothing is appended), acks=1 still works.
    wait_for(lambda: isr(cluster, topic) == [0, 1], 60, "the ISR to lose broker 2")
    refused = produce(leader, topic, [b"refused"])
    assert refused.error_code == ErrorCode.NOT_ENOUGH_REPLICAS
    assert end_offsets(leader, topic) == (2, 2)
    assert produce(leader, topic, [b"acks=1"], acks=1).error_code == ErrorCode.NONE
    assert end_offsets(leader, topic)[1] == 3


def test_the_leader_shrinks_and_expands_the_isr_in_zookeeper(cluster_factory: Factory) -> None:
    cluster = cluster_factory(3, zookeeper_session_timeout_ms=30_000, replica_lag_time_max_ms=2_000)
    topic = unique_topic("isr")
    create_topic(cluster, topic, assignment={0: [0, 1, 2]})
    leader, follower = cluster.broker(0), cluster.broker(1)
    before, version = zk_state(cluster, topic)
    assert sorted(before["isr"]) == [0, 1, 2]
    follower.pause()
    try:
        assert produce(leader, topic, [b"x"], acks=1).error_code == ErrorCode.NONE
        # The follower cannot catch up within replica.lag.time.max.ms: the leader drops it.
        wait_for(lambda: sorted(zk_state(cluster, topic)[0]["isr"]) == [0, 2], 30, "the shrink")
        shrunk, shrunk_version = zk_state(cluster, topic)
        assert (shrunk["leader"], shrunk["leader_epoch"]) == (
            before["leader"],
            before["leader_epoch"],
        )
        assert shrunk_version > version  # written by compare-and-set on the znode version
        # acks=all now needs only the ISR that is left.
        assert produce(leader, topic, [b"y"]).error_code == ErrorCode.NONE
        # The controller learnt of it (/isr_change_notification) and told every broker.
        wait_for(lambda: isr(cluster, topic, 2) == [0, 2], 30, "the metadata to show the shrink")
    finally:
        follower.resume()
    wait_for(lambda: sorted(zk_state(cluster, topic)[0]["isr"]) == [0, 1, 2], 30, "the expansion")
    wait_for(lambda: isr(cluster, topic, 2) == [0, 1, 2], 30, "the metadata to show it")
    wait_for(lambda: high_watermark(follower, topic) == 2, 30, "the follower's HW")


def test_the_high_watermark_is_checkpointed(cluster_factory: Factory) -> None:
    cluster = cluster_factory(2, replica_high_watermark_checkpoint_interval_ms=200)
    topic = unique_topic("hw-checkpoint")
    create_topic(cluster, topic, assignment={0: [0, 1]})
    assert produce(cluster.broker(0), topic, [b"a", b"b", b"c"]).error_code == ErrorCode.NONE

    def checkpointed(broker: BrokerProcess) -> int | None:
        path = broker.data_dir / REPLICATION_CHECKPOINT
        return OffsetCheckpointFile(path).read().get((topic, 0)) if path.exists() else None

    for broker in cluster.brokers:
        wait_for(
            lambda b=broker: checkpointed(b) == 3, 30, f"broker {broker.broker_id}'s checkpoint"
        )
    # A restart (even a SIGKILL) starts from the checkpointed high watermark.
    cluster.broker(1).kill()
    # (Its registration must expire before it can register again.)
    wait_for(lambda: isr(cluster, topic) == [0], 60, "the controller to notice")
    cluster.broker(1).start()
    wait_for(lambda: high_watermark(cluster.broker(1), topic) == 3, 30, "the restarted replica")


def log_digest(broker: BrokerProcess, topic: str) -> str:
    directory = broker.data_dir / f"{topic}-0"
    return hashlib.sha256(
        b"".join(p.read_bytes() for p in sorted(Path(directory).glob("*.log")))
    ).hexdigest()


def test_a_returning_leader_truncates_what_the_new_leader_never_had(
    cluster_factory: Factory,
) -> None:
    cluster = cluster_factory(3, zookeeper_session_timeout_ms=6_000)
    topic = unique_topic("diverge")
    create_topic(
        cluster,
        topic,
        assignment={0: [0, 1, 2]},
        configs={"unclean.leader.election.enable": "true"},
    )
    old_leader, first, second = cluster.brokers
    assert produce(old_leader, topic, [b"committed-1", b"committed-2"]).error_code == 0
    wait_for(lambda: high_watermark(old_leader, topic) == 2, 30, "replication")
    first.kill()
    second.kill()
    wait_for(lambda: isr(cluster, topic) == [0], 60, "the ISR to shrink to the leader")
    # Written on the old leader alone: no other replica will ever have these.
    lost = produce(old_leader, topic, [b"divergent-1", b"divergent-2", b"divergent-3"])
    assert (lost.error_code, lost.base_offset) == (0, 2)
    old_leader.kill()
    # Unclean election: the first replica back leads with what it has (offsets 0-1).
    first.start()
    second.start()
    wait_for(lambda: leader_id(cluster, topic, 1) == 1, 60, "a new leader")
    written = produce(first, topic, [b"new-leader-1"])
    assert (written.error_code, written.base_offset) == (0, 2)
    old_leader.start()
    wait_for(lambda: isr(cluster, topic, 1) == [0, 1, 2], 60, "the old leader back in the ISR")
    wait_for(
        lambda: len({log_digest(b, topic) for b in cluster.brokers}) == 1,
        30,
        "identical logs on every replica",
    )
    assert high_watermark(old_leader, topic) == 3
    assert "truncating from 5 to 2" in old_leader.log_tail(200_000)
