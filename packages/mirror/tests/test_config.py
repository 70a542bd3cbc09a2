"""mm2.properties with MirrorMaker 2's names: lookup order, defaults, and errors that name
the key, the value and the rule."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gregor.mirror import IdentityReplicationPolicy, MirrorConfigError, load
from gregor.mirror.config import MirrorConfig, parse_properties

MM2 = """\
# two datacenters
clusters = A, B
A.bootstrap.servers = a1:9092,a2:9092
B.bootstrap.servers: b1:9092
A.security.protocol = PLAINTEXT
A.consumer.max.poll.records = 1000
B.producer.linger.ms = 20
B.admin.request.timeout.ms = 5000
B.config.storage.replication.factor = 1
A->B.enabled = true
A->B.topics = orders.*, \\
    payments
A->B.groups.exclude = test-.*
B->A.enabled = false
replication.factor = 3
emit.checkpoints.interval.seconds = 5
A->B.emit.checkpoints.interval.seconds = 7
sync.group.offsets.enabled = true
"""


def test_parse_properties() -> None:
    props = parse_properties("a=1\n  b : 2\nc 3\n# d=4\n! e=5\nf=x\\\n   y\ng\\=h=i\n")
    assert props == {"a": "1", "b": "2", "c": "3", "f": "xy", "g=h": "i"}


def test_mm2_config(tmp_path: Path) -> None:
    path = tmp_path / "mm2.properties"
    path.write_text(MM2)
    config = load(path)
    assert list(config.clusters) == ["A", "B"]
    a, b = config.clusters["A"], config.clusters["B"]
    assert a.consumer_config() == {
        "bootstrap.servers": "a1:9092,a2:9092",
        "security.protocol": "PLAINTEXT",
        "max.poll.records": "1000",
    }
    assert b.producer_config() == {"bootstrap.servers": "b1:9092", "linger.ms": "20"}
    assert b.admin_config() == {"bootstrap.servers": "b1:9092", "request.timeout.ms": "5000"}
    [flow] = config.enabled_flows()
    assert flow.name == "A->B"
    assert flow.topics("orders-eu") and flow.topics("payments") and not flow.topics("paymentsx")
    assert not flow.topics("__consumer_offsets") and not flow.topics("x.internal")
    assert flow.groups("billing") and not flow.groups("test-1")
    assert flow.groups("console-consumer-7")  # groups.exclude replaces MM2's default
    assert not config.flows[1].groups("console-consumer-7")  # B->A keeps it
    assert flow.replication_factor == 3
    assert flow.emit_checkpoints_interval == 7  # the flow's own setting wins
    assert flow.sync_group_offsets and flow.emit_heartbeats
    assert flow.refresh_topics_interval == 600  # MM2's default
    assert flow.offset_syncs_cluster is a
    assert flow.offset_syncs_topic == "mm2-offset-syncs.B.internal"
    assert flow.checkpoints_topic == "A.checkpoints.internal"
    assert config.enabled_flows({"A"}) == []
    assert config.shutdown_timeout == 5.0  # Connect's task.shutdown.graceful.timeout.ms


def test_offset_syncs_on_the_target() -> None:
    config = MirrorConfig.from_properties(
        {
            "clusters": "A,B",
            "A.bootstrap.servers": "a:1",
            "B.bootstrap.servers": "b:1",
            "offset-syncs.topic.location": "target",
            "replication.policy.class": "IdentityReplicationPolicy",
        }
    )
    flow = config.flows[0]
    assert flow.offset_syncs_cluster.alias == "B"
    assert flow.offset_syncs_topic == "mm2-offset-syncs.A.internal"
    assert isinstance(flow.policy, IdentityReplicationPolicy)


def test_exactly_once_keeps_the_offset_syncs_on_the_target() -> None:
    props = {"clusters": "A,B", "A.bootstrap.servers": "a:1", "B.bootstrap.servers": "b:1"}
    flow = MirrorConfig.from_properties({**props, "exactly.once.support": "enabled"}).flows[0]
    assert flow.exactly_once
    assert flow.offset_syncs_cluster.alias == "B"
    assert flow.offset_syncs_topic == "mm2-offset-syncs.A.internal"
    other = MirrorConfig.from_properties({**props, "exactly.once.source.support": "enabled"})
    assert other.flows[1].exactly_once and other.flows[1].offset_syncs_cluster.alias == "A"
    assert not MirrorConfig.from_properties(props).flows[0].exactly_once


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"A->B.enabled": "yes"}, "A->B.enabled = 'yes': must be true or false"),
        ({"emit.checkpoints.interval.seconds": "0"}, "must be at least 1"),
        ({"A->B.topics": "orders("}, "'orders(' is not a regular expression"),
        ({"A->C.enabled": "true"}, "A->C.enabled: 'A->C' is not a flow"),
        ({"offset-syncs.topic.location": "middle"}, "must be one of source, target"),
        (
            {"A->B.exactly.once.support": "required", "offset-syncs.topic.location": "source"},
            "offset-syncs.topic.location = 'source': must be target when exactly once is "
            "enabled for A->B",
        ),
        ({"replication.policy.class": "x.Y"}, "replication.policy.class: 'x.Y' is not"),
        ({"replication.factor": "0"}, "replication.factor = '0': must be at least 1, or -1"),
        (
            {"task.shutdown.graceful.timeout.ms": "soon"},
            "task.shutdown.graceful.timeout.ms = 'soon': must be an integer",
        ),
        (
            {"metrics.prometheus.listener": "127.0.0.1:9108"},
            "metrics.prometheus.listener = '127.0.0.1:9108': must be http://HOST:PORT",
        ),
        # Client settings are checked at start too, not when a flow first connects.
        (
            {"A.consumer.fetch.max.wait.mss": "5"},
            "A: its consumer settings (A.consumer.* and A.*): unknown consumer config "
            "'fetch.max.wait.mss'; did you mean 'fetch.max.wait.ms'?",
        ),
        (
            {"B.producer.acks": "some"},
            "B: its producer settings (B.producer.* and B.*): acks='some'",
        ),
        ({"A.frobnicate": "1"}, "A.frobnicate = '1': not a setting of any client"),
        (
            {"A.security.protocol": "SASL_SSL"},
            "A: its consumer settings (A.consumer.* and A.*): ",
        ),
    ],
)
def test_bad_values_name_key_value_and_rule(extra: dict[str, str], message: str) -> None:
    props = {"clusters": "A, B", "A.bootstrap.servers": "a:1", "B.bootstrap.servers": "b:1"}
    with pytest.raises(MirrorConfigError, match=re.escape(message)):
        MirrorConfig.from_properties({**props, **extra})


def test_cluster_wide_client_settings_go_to_the_clients_that_have_them() -> None:
    """As MM2's Java clients ignore what is not theirs: `A.isolation.level` reaches A's
    consumer only, `B.compression.type` B's producer only, `A.client.id` all three."""
    props = {
        "clusters": "A, B",
        "A.bootstrap.servers": "a:1",
        "B.bootstrap.servers": "b:1",
        "A.isolation.level": "read_committed",
        "A.client.id": "mirror",
        "B.compression.type": "lz4",
    }
    clusters = MirrorConfig.from_properties(props).clusters
    a, b = clusters["A"], clusters["B"]
    assert a.consumer_config()["isolation.level"] == "read_committed"
    assert "isolation.level" not in a.producer_config()
    assert "isolation.level" not in a.admin_config()
    assert {a.consumer_config()["client.id"], a.producer_config()["client.id"]} == {"mirror"}
    assert a.admin_config()["client.id"] == "mirror"
    assert b.producer_config()["compression.type"] == "lz4"
    assert "compression.type" not in b.consumer_config()


def test_prometheus_listener() -> None:
    props = {"clusters": "A, B", "A.bootstrap.servers": "a:1", "B.bootstrap.servers": "b:1"}
    assert MirrorConfig.from_properties(props).prometheus_listener is None
    config = MirrorConfig.from_properties(
        {**props, "metrics.prometheus.listener": "http://127.0.0.1:9108"}
    )
    assert config.prometheus_listener == ("127.0.0.1", 9108)


def test_missing_clusters_and_servers() -> None:
    with pytest.raises(MirrorConfigError, match="clusters: missing"):
        MirrorConfig.from_properties({})
    with pytest.raises(MirrorConfigError, match=r"B\.bootstrap\.servers: missing"):
        MirrorConfig.from_properties({"clusters": "A,B", "A.bootstrap.servers": "a:1"})


def test_log_format_json(tmp_path: Path) -> None:
    """gregor-mirror with log.format=json writes one JSON object per log line: its first,
    where it serves its metrics, is read back (no cluster is needed for it)."""
    config = tmp_path / "mm2.properties"
    config.write_text(
        "clusters = A, B\nA.bootstrap.servers = 127.0.0.1:1\nB.bootstrap.servers = 127.0.0.1:1\n"
        "A->B.enabled = true\nlog.format = json\n"
        "metrics.prometheus.listener = http://127.0.0.1:0\n"
    )
    mirror = subprocess.Popen(
        [str(Path(sys.executable).parent / "gregor-mirror"), str(config)],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert mirror.stderr is not None
        entry = json.loads(mirror.stderr.readline())
    finally:
        mirror.kill()  # no cluster: only its first line matters (it has no child process)
        mirror.wait(60)
    assert entry["level"] == "INFO" and entry["logger"] == "gregor.mirror"
    assert entry["message"].startswith("metrics for Prometheus on http://127.0.0.1:")
    with pytest.raises(MirrorConfigError, match=r"log\.format"):
        MirrorConfig.from_properties(
            {"clusters": "A", "A.bootstrap.servers": "h:1", "log.format": "xml"}
        )
