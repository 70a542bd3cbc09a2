"""kcat's balanced consumer groups (`kcat -G`), with Debian's librdkafka and with the current
one confluent-kafka bundles: three members split six partitions and each reads only its own,
their offsets are committed when they stop, and a member started later resumes exactly
there."""

from __future__ import annotations

import shutil
import signal
import subprocess
import threading
from typing import IO

import pytest
from confluent_kafka.admin import AdminClient
from groups.helpers import committed_offsets, produce

from gregor.devcluster import LocalCluster
from gregor_testing.cluster import create_topic, unique_topic, wait_for
from gregor_testing.matrix import kcat_env

PARTITIONS = 6
EACH = 10  # records per partition per round

pytestmark = pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed")

KCATS = [
    pytest.param(False, marks=pytest.mark.interop("kcat", "groups"), id="kcat"),
    pytest.param(True, marks=pytest.mark.interop("kcat-new", "groups"), id="kcat-new"),
]


class KcatMember:
    """`kcat -G GROUP TOPIC` printing `partition offset value` lines (unbuffered), read by a
    thread; `stop()` sends SIGTERM, on which kcat closes its consumer (committing its
    offsets)."""

    def __init__(self, cluster: LocalCluster, group: str, topic: str, new: bool, *extra: str):
        env = kcat_env(new=new)
        if env is None:
            pytest.skip("no current librdkafka to run kcat with (confluent-kafka's)")
        self.process = subprocess.Popen(
            ["kcat", "-b", cluster.bootstrap_servers, "-G", group, "-u", "-f", "%p %o %s\n",
             "-X", "auto.offset.reset=earliest", "-X", "auto.commit.interval.ms=100",
             "-X", "session.timeout.ms=6000", "-X", "heartbeat.interval.ms=500",
             *extra, topic],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            text=True,
        )  # fmt: skip
        self.read: list[tuple[int, int, str]] = []
        self.errors: list[str] = []
        assert self.process.stdout is not None and self.process.stderr is not None
        self._threads = [
            threading.Thread(target=self._lines, args=(self.process.stdout, True), daemon=True),
            threading.Thread(target=self._lines, args=(self.process.stderr, False), daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    def _lines(self, stream: IO[str], records: bool) -> None:
        for line in stream:
            if records:
                partition, offset, value = line.rstrip("\n").split(" ", 2)
                self.read.append((int(partition), int(offset), value))
            else:
                self.errors.append(line)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(60)
        finally:
            self.kill()
        for thread in self._threads:
            thread.join(10)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def assignments(cluster: LocalCluster, group: str) -> dict[str, set[int]]:
    """Each member's partitions (by client host and member id), as DescribeGroups tells."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    description = admin.describe_consumer_groups([group])[group].result(30)
    if str(description.state).rsplit(".", 1)[-1] != "STABLE":
        return {}
    return {
        member.member_id: {tp.partition for tp in member.assignment.topic_partitions}
        for member in description.members
    }


@pytest.mark.parametrize("new", KCATS)
def test_kcat_balanced_group_splits_commits_and_resumes(
    group_cluster: LocalCluster, new: bool
) -> None:
    topic = unique_topic("kcat-group")
    create_topic(group_cluster, topic, partitions=PARTITIONS, replication_factor=3)
    group = unique_topic("g-kcat")
    members = [KcatMember(group_cluster, group, topic, new) for _ in range(3)]
    try:
        split: dict[str, set[int]] = {}

        def balanced() -> bool:
            for member in members:
                assert member.process.poll() is None, "".join(member.errors)
            split.update(assignments(group_cluster, group))
            owned = list(split.values())
            return (
                len(owned) == 3
                and all(len(o) == 2 for o in owned)
                and set().union(*owned) == set(range(PARTITIONS))
            )

        wait_for(balanced, 60, "2 of the 6 partitions for each of 3 kcat members")
        first = [f"first-{i}".encode() for i in range(PARTITIONS * EACH)]
        produce(group_cluster, topic, first, PARTITIONS)
        wait_for(lambda: sum(len(m.read) for m in members) >= len(first), 60, "every record read")
    finally:
        for member in members:
            member.stop()
    read = [record for member in members for record in member.read]
    assert sorted(value for _, _, value in read) == sorted(v.decode() for v in first)
    # Each member read two partitions, none read by another.
    owned = [{p for p, _, _ in member.read} for member in members]
    assert sorted(map(len, owned)) == [2, 2, 2]
    assert set().union(*owned) == set(range(PARTITIONS))
    assert sorted(owned, key=min) == sorted(split.values(), key=min)
    # Stopping committed where each member was.
    assert committed_offsets(group_cluster, group) == {(topic, p): EACH for p in range(6)}, [
        m.errors for m in members
    ]

    second = [f"second-{i}".encode() for i in range(PARTITIONS * EACH)]
    produce(group_cluster, topic, second, PARTITIONS)
    later = KcatMember(group_cluster, group, topic, new, "-e")  # exits at the end
    try:
        assert later.process.wait(60) == 0, "".join(later.errors)
    finally:
        later.stop()
    # It resumed exactly at the committed offsets: the second round, each record once.
    assert sorted(later.read) == sorted(
        (i % PARTITIONS, EACH + i // PARTITIONS, v.decode()) for i, v in enumerate(second)
    )
    assert committed_offsets(group_cluster, group) == {(topic, p): 2 * EACH for p in range(6)}
