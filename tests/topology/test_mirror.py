"""gregor-mirror on the two-datacenter topology: dc2's mirror host copies dc1's topics into
dc2 across the WAN. The WAN is cut while records are produced in dc1 and mirrored; once it
heals, dc2's remote topic catches up with every record dc1 acknowledged. Then dc1 dies
whole, and a consumer group goes on in dc2 from its translated offsets."""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gregor.devcluster.netfaults import NetworkFaults
from gregor.devcluster.netns import NetnsTopology
from gregor_testing.clienthosts import finish, workload, workload_argv
from gregor_testing.history import check
from gregor_testing.nemesis import wait_until
from gregor_testing.topology import requires_netns, run_on, topology_up

pytestmark = [requires_netns, pytest.mark.slow]

TOPIC = "orders"
REMOTE = f"dc1.{TOPIC}"  # MirrorMaker 2's DefaultReplicationPolicy
SECONDS = 24.0  # of producing in dc1
CUT = 10.0  # seconds the WAN stays cut, from a few seconds into the run


@pytest.fixture(scope="module")
def topology(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NetnsTopology]:
    with topology_up(tmp_path_factory.mktemp("mirror"), mirrors=True) as topology:
        yield topology


def acked(history: Path) -> int:
    if not history.exists():
        return 0
    return sum('"op": "ack"' in line for line in history.read_text().splitlines())


def high_watermarks(topology: NetnsTopology, topic: str) -> dict[str, int]:
    """The topic's high watermarks in dc2, asked from dc2's client host."""
    argv = workload_argv(topology, "ends", "--topic", topic, host="dc2-client", datacenter="dc2")
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    found: dict[str, int] = json.loads(done.stdout)
    return found


def test_a_wan_cut_while_mirroring_loses_nothing_once_healed(
    topology: NetnsTopology, tmp_path: Path
) -> None:
    history = tmp_path / "dc1.jsonl"
    finish(workload(topology, "create", "--topic", TOPIC), "create", 90)
    producer = workload(
        topology, "produce", "--topic", TOPIC, "--history", str(history),
        "--seconds", str(SECONDS),
    )  # fmt: skip
    network = NetworkFaults(topology)
    try:
        # Cut once dc1 acknowledges and the mirror copies (dc2 has the remote topic).
        wait_until(lambda: acked(history) > 0, 60, "dc1's first acknowledgement")
        wait_until(lambda: any(high_watermarks(topology, REMOTE).values()), 60, "the mirror")
        network.cut_wan()
        cut_at = acked(history)
        threading.Event().wait(CUT)  # the fault's length, not a wait for a condition
        during = acked(history) - cut_at
        network.heal()
        finish(producer, "producers", SECONDS + 120)
    finally:
        network.heal()
        if producer.poll() is None:
            producer.kill()
            producer.wait()
    total = acked(history)
    assert during > 0, "dc1 acknowledged nothing while the WAN was cut"

    # dc2's remote topic catches up (the mirror copies at least once: >= what dc1 has).
    def caught_up() -> bool:
        return sum(high_watermarks(topology, REMOTE).values()) >= total

    started = time.monotonic()
    wait_until(caught_up, 180, f"dc2's {REMOTE} to hold {total} records")
    catch_up_s = time.monotonic() - started

    mirrored = tmp_path / "dc2.jsonl"
    shutil.copy(history, mirrored)  # dc1's sends and acknowledgements, then dc2's reads
    argv = workload_argv(
        topology, "read", "--topic", REMOTE, "--history", str(mirrored),
        host="dc2-client", datacenter="dc2",
    )  # fmt: skip
    subprocess.run(argv, check=True, timeout=240)
    report = check(mirrored)
    print(
        f"acked in dc1: {total} ({during} while the WAN was cut); in dc2's {REMOTE}: "
        f"read {report.read}, lost {len(report.lost)}, duplicates {len(report.duplicates)}, "
        f"reordered {len(report.reordered)}, phantom {len(report.phantom)}; caught up "
        f"{catch_up_s:.1f} s after the producers ended"
    )
    assert report.incomplete == []
    assert report.lost == [], f"acknowledged in dc1, not in dc2: {report.lost[:20]}"
    assert report.phantom == []
    assert report.reordered == []


CONSUME_SOME = """
import json, sys
from confluent_kafka import Consumer
bootstrap, topic, group, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                     "enable.auto.commit": False, "auto.offset.reset": "earliest"})
consumer.subscribe([topic])
ids = []
while len(ids) < count:
    msg = consumer.poll(1.0)
    if msg is not None and not msg.error():
        ids.append(msg.value().decode())
consumer.commit(asynchronous=False)
consumer.close()
print(json.dumps(ids))
"""

TRANSLATE = """
import json, sys, trio
from gregor.mirror import translate_offsets
bootstrap, source, group = sys.argv[1:]
found = trio.run(translate_offsets, {"bootstrap.servers": bootstrap}, source, group)
print(json.dumps({f"{tp.topic}:{tp.partition}": o.offset for tp, o in found.items()}))
"""

CONSUME_FROM = """
import json, sys
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
bootstrap, group, topic, offsets = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                     "enable.auto.commit": False})
# Where the group committed, its translated offset; elsewhere from the start, as the group's
# auto.offset.reset=earliest would.
partitions = consumer.list_topics(topic, timeout=30).topics[topic].partitions
assigned = [TopicPartition(topic, p, offsets.get(f"{topic}:{p}", OFFSET_BEGINNING))
            for p in partitions]
consumer.assign(assigned)
ends = {tp.partition: consumer.get_watermark_offsets(tp, 30) for tp in assigned}
left = {tp.partition for tp in assigned
        if max(tp.offset, ends[tp.partition][0]) < ends[tp.partition][1]}
ids = []
while left:
    msg = consumer.poll(1.0)
    if msg is not None and not msg.error():
        ids.append(msg.value().decode())
        if msg.offset() + 1 >= ends[msg.partition()][1]:
            left.discard(msg.partition())
consumer.close()
print(json.dumps(ids))
"""


def run_json(topology: NetnsTopology, host: str, code: str, *args: object) -> Any:
    done = run_on(topology, host, code, *map(str, args), timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def test_dc1_fails_over_to_dc2_with_translated_offsets(
    topology: NetnsTopology, tmp_path: Path
) -> None:
    """A group consumes part of a topic in dc1 and commits; dc1 dies whole (every process
    SIGKILLed); the group goes on in dc2 from its offsets as the mirror's checkpoints
    translate them: it reads on exactly where it stopped, nothing again, nothing missed."""
    topic, group, remote = "payments", "billing", "dc1.payments"
    history = tmp_path / "dc1.jsonl"
    finish(workload(topology, "create", "--topic", topic), "create", 90)
    producer = workload(
        topology, "produce", "--topic", topic, "--history", str(history), "--seconds", "8"
    )
    finish(producer, "producers", 120)
    report = check(history)
    acked_ids = {line["id"] for line in map(json.loads, history.read_text().splitlines())
                 if line["op"] == "ack"}  # fmt: skip
    assert report.acked == len(acked_ids) > 0
    dc1, dc2 = topology.bootstrap_servers("dc1"), topology.bootstrap_servers("dc2")
    consumed = run_json(
        topology, "dc1-client", CONSUME_SOME, dc1, topic, group, len(acked_ids) // 2
    )
    wait_until(
        lambda: sum(high_watermarks(topology, remote).values()) >= len(acked_ids),
        180,
        f"dc2's {remote} to catch up",
    )
    # The checkpoints in dc2 translate the group's commits (every 5 s).
    translated: dict[str, int] = {}

    def checkpointed() -> bool:
        translated.update(run_json(topology, "dc2-client", TRANSLATE, dc2, "dc1", group))
        return sum(translated.values()) >= len(consumed)  # offsets alike in both (no dups)

    wait_until(checkpointed, 120, f"the checkpoints of {group} in dc2")
    for host in topology.topology.hosts_of("dc1"):
        if host.name in topology.processes:
            topology.processes[host.name].kill()
    read_in_dc2 = run_json(
        topology, "dc2-client", CONSUME_FROM, dc2, group, remote, json.dumps(translated)
    )
    reread = set(consumed) & set(read_in_dc2)
    missed = acked_ids - set(consumed) - set(read_in_dc2)
    print(
        f"acked in dc1: {len(acked_ids)}; consumed in dc1: {len(consumed)}; "
        f"translated offsets {translated}; read in dc2 after the failover: "
        f"{len(read_in_dc2)}; re-read {len(reread)}, missed {len(missed)}"
    )
    assert (len(reread), len(missed)) == (0, 0), (sorted(reread)[:20], sorted(missed)[:20])
