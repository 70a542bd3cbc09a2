"""Issue 10's stall, reproduced: a new group's KafkaJS consumer that read nothing for 30 s.

KafkaJS (2.2) joins and syncs inside its consumer's start; an error there that is not a
rebalance (here COORDINATOR_NOT_AVAILABLE, Kafka's answer to a SyncGroup whose group write
failed) "crashes" the consumer, which starts again 300 ms later under a new member id
without a LeaveGroup for the old one (its runner is not yet running, so its stop skips the
leave). The group, now rebalancing, waits for the old member to rejoin until its session
ends, as Kafka's coordinator does: with KafkaJS's default session of 30 s, the restarted
consumer gets nothing for 30 s. Here the session is 6 s and the failed write is real: the
group's partition of `__consumer_offsets` is below `min.insync.replicas` while one of its
replicas is down. The coordinator's log names the member the group waits for, so the
stall is not silent.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from gregor.broker.coordinator.partitioning import partition_for
from gregor.devcluster import LocalCluster
from gregor.devcluster.admin import controller
from gregor_testing import faults
from gregor_testing.cluster import create_topic, log_mark, partitions_of, unique_topic, wait_for
from gregor_testing.matrix import NODE_MODULES

HERE = Path(__file__).resolve().parent
RECORDS = 5

pytestmark = pytest.mark.skipif(
    shutil.which("node") is None or not (NODE_MODULES / "kafkajs").is_dir(),
    reason="KafkaJS is not installed (infra/setup.sh installs it into tests/interop)",
)


@pytest.mark.interop("kafkajs", "groups")
def test_kafkajs_restarted_after_a_failed_sync_waits_for_its_abandoned_member(
    cluster_factory: Callable[..., LocalCluster],
) -> None:
    cluster = cluster_factory(3, **{"min.insync.replicas": "3", "replica.lag.time.max.ms": "2000"})
    topic = unique_topic("js-restart")
    create_topic(cluster, topic, partitions=1, replication_factor=3)
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "1"})
    for i in range(RECORDS):
        producer.produce(topic, f"v{i}".encode())
    assert producer.flush(30) == 0

    group = unique_topic("g-js-restart")
    coordinator = faults.find_coordinator(cluster, group, faults.GROUP_KEY)
    partition = partition_for(
        group, len(partitions_of(cluster, "__consumer_offsets", coordinator.broker_id))
    )

    def offsets_partition() -> Any:
        return partitions_of(cluster, "__consumer_offsets", coordinator.broker_id)[partition]

    assert offsets_partition().leader_id == coordinator.broker_id
    # A replica of the group's partition that is neither its leader nor the controller.
    spared = {coordinator.broker_id, controller(cluster).broker_id}
    victim = cluster.broker(next(r for r in offsets_partition().replica_nodes if r not in spared))
    victim.kill()
    wait_for(lambda: len(offsets_partition().isr_nodes) == 2, 60, "the ISR to shrink to 2")

    mark = log_mark(coordinator)
    live = ",".join(f"{b.host}:{b.port}" for b in cluster.brokers if b is not victim)
    consumer = subprocess.Popen(
        ["node", str(HERE / "kafkajs_restart.js"), live, topic, group, str(RECORDS), "90000"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "NODE_PATH": str(NODE_MODULES)},
    )
    events: list[dict[str, Any]] = []

    def pump() -> None:
        assert consumer.stdout is not None
        events.extend(json.loads(line) for line in consumer.stdout)

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        wait_for(lambda: any(e["event"] == "restart" for e in events), 60, "KafkaJS to restart")
        victim.start()  # the writes succeed again
        consumer.wait(timeout=120)
    finally:
        if consumer.poll() is None:
            consumer.kill()
            consumer.wait()
    reader.join(10)
    assert consumer.stderr is not None
    assert consumer.returncode == 0, (events, consumer.stderr.read().decode(errors="replace"))

    crash = next(e for e in events if e["event"] == "crash")
    assert "The group coordinator is not available" in crash["error"]
    assert sorted(e["value"] for e in events if e["event"] == "record") == [
        f"v{i}" for i in range(RECORDS)
    ]
    joined = [e["memberId"] for e in events if e["event"] == "joined"]

    log = coordinator.log_path.read_bytes()[mark:].decode(errors="replace")
    failed_write = f"group {group}: writing generation 1 to __consumer_offsets-{partition} failed"
    assert f"{failed_write}: NOT_ENOUGH_REPLICAS" in log
    # The coordinator names the member it waits for: the one KafkaJS gave up on ...
    waiting = re.search(
        rf"group {group}: waiting up to \d+ ms for 1 member\(s\) to rejoin: (\S+) "
        r"\(client restart at \S+, session timeout 6000 ms\)",
        log,
    )
    assert waiting is not None, log
    abandoned = waiting[1]
    assert abandoned not in joined
    # ... which holds the group until its session ends; then the new member gets its generation.
    expired = log.index(f"member {abandoned} failed (session timeout 6000 ms); removing it")
    assert log.index(failed_write) < waiting.start() < expired
    assert re.search(rf"group {group}: generation \d+ with 1 members", log[expired:])
