"""The whole topology with its services: two ZooKeeper ensembles and six brokers in their
namespaces. It comes up and goes down cleanly again and again; a real client (confluent-kafka)
on a client host produces and consumes across the WAN, and a WAN cut stops exactly that
traffic until healed."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gregor.devcluster import namespaces
from gregor.devcluster.netfaults import NetworkFaults
from gregor.devcluster.netns import NetnsTopology, teardown
from gregor.devcluster.topology import load
from gregor_testing.topology import (
    DESCRIPTION,
    cli_down,
    leftovers,
    requires_netns,
    run_on,
    start_cli,
    topology_up,
)

pytestmark = [requires_netns, pytest.mark.slow]

# `nox -s topology_cycles` runs 10; the default suite a short variant.
CYCLES = int(os.environ.get("GREGOR_TOPOLOGY_CYCLES", "2"))

CREATE_TOPIC = """
import sys
from confluent_kafka.admin import AdminClient, NewTopic
bootstrap, topic = sys.argv[1:]
admin = AdminClient({"bootstrap.servers": bootstrap})
admin.create_topics([NewTopic(topic, 3, 3)])[topic].result(60)
"""

PRODUCE = """
import json, sys
from confluent_kafka import Producer
bootstrap, topic, first, count, timeout_ms = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:])
acked, errors = [], set()
def report(err, msg):
    if err:
        errors.add(err.name())
    else:
        acked.append(int(msg.value()))
producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                     "enable.idempotence": True, "message.timeout.ms": timeout_ms})
for i in range(first, first + count):
    producer.produce(topic, key=str(i % 5).encode(), value=str(i).encode(), on_delivery=report)
producer.flush(timeout_ms / 1000 + 30)
print(json.dumps({"acked": sorted(acked), "errors": sorted(errors)}))
"""

CONSUME = """
import json, sys, time
from confluent_kafka import Consumer, TopicPartition
bootstrap, topic, expected = sys.argv[1], sys.argv[2], int(sys.argv[3])
consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "wan-reader",
                     "enable.auto.commit": False})
consumer.assign([TopicPartition(topic, p, 0) for p in range(3)])
records, deadline = [], time.monotonic() + 60
while len(records) < expected and time.monotonic() < deadline:
    msg = consumer.poll(1.0)
    if msg is not None and not msg.error():
        records.append([msg.partition(), msg.offset(), int(msg.key()), int(msg.value())])
consumer.close()
print(json.dumps(records))
"""

ENDS = """
import sys
from confluent_kafka import Consumer, TopicPartition
consumer = Consumer({"bootstrap.servers": sys.argv[1], "group.id": "ends"})
print(consumer.get_watermark_offsets(TopicPartition("dc1.heartbeats", 0), 30)[1])
consumer.close()
"""


def run_json(topology: NetnsTopology, host: str, code: str, *args: object) -> Any:
    done = run_on(topology, host, code, *map(str, args))
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout) if done.stdout.strip() else None


@pytest.fixture(scope="module")
def topology(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NetnsTopology]:
    with topology_up(tmp_path_factory.mktemp("topology")) as topology:
        yield topology


def test_up_and_down_cleanly_again_and_again(tmp_path: Path) -> None:
    """Each cycle, the topology as `nox -s topology -- up` brings it up: every ZooKeeper and
    broker serves in its own namespace and both mirrors copy; then nothing of the run is
    left: no namespace, /etc/netns folder, process or state file."""
    timings = []
    for cycle in range(CYCLES):
        started = time.monotonic()
        with topology_up(tmp_path, mirrors=True) as topology:
            up = time.monotonic() - started
            rows = topology.status()
            assert [r.host.name for r in rows if not r.exists] == []
            serving = [r.host.name for r in rows if r.serving]
            assert len(serving) == 3 + 1 + 6 + 2  # the two ensembles, six brokers, mirrors
            assert all(len(r.pids) == 1 for r in rows if r.serving)
            stopping = time.monotonic()
        timings.append((up, time.monotonic() - stopping))
        assert leftovers(topology) == [], f"cycle {cycle}"
    print("up/down seconds: " + ", ".join(f"{u:.1f}/{d:.1f}" for u, d in timings))


def test_nothing_outlives_a_crashed_harness_once_down_ran(tmp_path: Path) -> None:
    """`up` killed outright while it runs: its ZooKeepers and brokers get SIGTERM as it dies
    (the launcher's parent-death signal), its namespaces stay; `down` from another process
    finds whatever is left in them and removes it all."""
    topology = NetnsTopology(load(DESCRIPTION), tmp_path)
    try:
        cli = start_cli(tmp_path)
        # The ensembles, six brokers and two mirrors copying.
        assert sum(1 for row in topology.status() if row.serving) == 3 + 1 + 6 + 2
        cli.kill()
        cli.wait()
        assert len(namespaces.namespaces(topology.prefix)) == 17
        cli_down(tmp_path)
        assert leftovers(topology) == []
    finally:
        teardown(tmp_path)


def test_a_client_produces_and_consumes_across_the_wan(topology: NetnsTopology) -> None:
    """dc2's client writes to dc1's cluster (acks=all, idempotent, keyed) and reads it all
    back from there: every record once, each key's records in order."""
    dc1 = topology.bootstrap_servers("dc1")
    run_json(topology, "dc2-client", CREATE_TOPIC, dc1, "across")
    produced = run_json(topology, "dc2-client", PRODUCE, dc1, "across", 0, 200, 30000)
    assert produced == {"acked": list(range(200)), "errors": []}
    records = run_json(topology, "dc2-client", CONSUME, dc1, "across", 200)
    assert sorted(r[3] for r in records) == list(range(200))
    for key in range(5):
        values = [value for _, _, k, value in records if k == key]
        assert values == sorted(values)
        assert len({p for p, _, k, _ in records if k == key}) == 1  # a key, a partition


def test_a_wan_cut_stops_cross_datacenter_traffic_until_healed(topology: NetnsTopology) -> None:
    dc1 = topology.bootstrap_servers("dc1")
    run_json(topology, "dc1-client", CREATE_TOPIC, dc1, "cut")
    faults = NetworkFaults(topology)
    faults.cut_wan()
    try:
        across = run_json(topology, "dc2-client", PRODUCE, dc1, "cut", 0, 10, 3000)
        assert across == {"acked": [], "errors": ["_MSG_TIMED_OUT"]}
        inside = run_json(topology, "dc1-client", PRODUCE, dc1, "cut", 10, 10, 30000)
        assert inside == {"acked": list(range(10, 20)), "errors": []}
    finally:
        faults.heal()
    healed = run_json(topology, "dc2-client", PRODUCE, dc1, "cut", 20, 10, 30000)
    assert healed == {"acked": list(range(20, 30)), "errors": []}
    records = run_json(topology, "dc2-client", CONSUME, dc1, "cut", 20)
    assert sorted(r[3] for r in records) == list(range(10, 30))  # none of the timed out


def test_mirrors_are_ready_once_they_copy(topology: NetnsTopology) -> None:
    """A mirror is ready once a record of its source has reached its datacenter: with the
    WAN cut, each mirror runs and is not ready, and says why; healed, both copy."""
    faults = NetworkFaults(topology)
    faults.cut_wan()
    try:
        mirrors = topology.start_mirrors()
        for mirror in mirrors:
            other = "dc2" if mirror.datacenter == "dc1" else "dc1"
            with pytest.raises(RuntimeError, match=f"not copying after 1s: no broker of {other}"):
                mirror.wait_ready(1.0)
            assert mirror.is_running()
    finally:
        faults.heal()
    try:
        for mirror in mirrors:
            mirror.wait_ready(120.0)
        status = {row.host.name: row.serving for row in topology.status()}
        assert status["dc1-mirror"] is status["dc2-mirror"] is True
        ends = run_json(topology, "dc2-client", ENDS, topology.bootstrap_servers("dc2"))
        assert ends > 0  # dc1's heartbeats in dc2, as dc1.heartbeats
    finally:
        topology.stop_mirrors()
