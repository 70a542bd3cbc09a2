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
from gregor.mirror.config import FlowConfig, MirrorConfig, parse_properties
from gregor.mirror.runner import Mirror
from gregor.mirror.topics import should_replicate

# The console script of this environment, and an mm2.properties whose clusters nothing
# answers at: the CLI tests need no cluster.
GREGOR_MIRROR = Path(sys.executable).parent / "gregor-mirror"
NOWHERE = (
    "clusters = A, B\nA.bootstrap.servers = 127.0.0.1:1\nB.bootstrap.servers = 127.0.0.1:1\n"
    "A->B.enabled = true\n"
)

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
        NOWHERE + "log.format = json\nmetrics.prometheus.listener = http://127.0.0.1:0\n"
    )
    mirror = subprocess.Popen(
        [str(GREGOR_MIRROR), str(config)],
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


# -- settings read from mm2.properties text ------------------------------------------------


def flows_of(text: str) -> dict[str, FlowConfig]:
    """The flows of an mm2.properties text (A and B), by name."""
    config = MirrorConfig.from_properties(parse_properties(NOWHERE + text))
    return {flow.name: flow for flow in config.flows}


INTERVALS = {  # MM2's name: (FlowConfig's field, MM2's default)
    "emit.heartbeats.interval.seconds": ("emit_heartbeats_interval", 1),
    "sync.group.offsets.interval.seconds": ("sync_group_offsets_interval", 60),
    "refresh.groups.interval.seconds": ("refresh_groups_interval", 600),
    "refresh.topics.interval.seconds": ("refresh_topics_interval", 600),
}


@pytest.mark.parametrize("key", sorted(INTERVALS))
def test_intervals_from_properties(key: str) -> None:
    """Each interval read from the text: set for all flows, or for A->B only (which then
    wins over the global one, and leaves B->A the global value)."""
    field, default = INTERVALS[key]
    assert {n: getattr(f, field) for n, f in flows_of("").items()} == {
        "A->B": default,
        "B->A": default,
    }
    everywhere = flows_of(f"{key} = 7\n")
    assert {n: getattr(f, field) for n, f in everywhere.items()} == {"A->B": 7, "B->A": 7}
    one = flows_of(f"{key} = 7\nA->B.{key}: 3\n")
    assert {n: getattr(f, field) for n, f in one.items()} == {"A->B": 3, "B->A": 7}
    # Every other interval keeps its default.
    for other, (other_field, other_default) in INTERVALS.items():
        if other != key:
            assert getattr(one["A->B"], other_field) == other_default


def test_separator_from_properties() -> None:
    """replication.policy.separator names remote topics and MM2's own (with the internal
    separator, as MM2 does by default), and tells remote topics from local ones: A->B does
    not send back B_orders (it came from B), but mirrors B.orders (a local name)."""
    flow = flows_of("replication.policy.separator = _\n")["A->B"]
    assert flow.policy.format_remote_topic(flow.source.alias, "orders") == "A_orders"
    assert flow.checkpoints_topic == "A_checkpoints_internal"
    assert flow.offset_syncs_topic == "mm2-offset-syncs_B_internal"
    assert not should_replicate(flow, "B_orders")
    assert should_replicate(flow, "B.orders")
    assert flow.policy.upstream_topic("A_orders") == "orders"
    plain = flows_of(
        "replication.policy.separator = __\n"
        "replication.policy.internal.topic.separator.enabled = false\n"
    )["A->B"]
    assert plain.policy.format_remote_topic("A", "orders") == "A__orders"
    assert plain.checkpoints_topic == "A.checkpoints.internal"


def test_disabled_features_from_properties() -> None:
    """`= false` reaches the flows: sync.topic.configs.enabled and emit.heartbeats.enabled
    (true by MM2's default) for every flow; sync.group.offsets.enabled for A->B, which
    wins over the global true. A mirror then runs no heartbeats."""
    text = (
        "B->A.enabled = true\n"
        "sync.topic.configs.enabled = false\n"
        "emit.heartbeats.enabled = FALSE\n"
        "sync.group.offsets.enabled = true\n"
        "A->B.sync.group.offsets.enabled = false\n"
    )
    defaults = flows_of("")["A->B"]
    assert defaults.sync_topic_configs and defaults.emit_heartbeats
    assert not defaults.sync_group_offsets
    flows = flows_of(text)
    assert {
        name: (f.sync_topic_configs, f.emit_heartbeats, f.sync_group_offsets)
        for name, f in flows.items()
    } == {"A->B": (False, False, False), "B->A": (False, False, True)}
    config = MirrorConfig.from_properties(parse_properties(NOWHERE + text))
    assert Mirror(config).heartbeats == []
    beating = Mirror(MirrorConfig.from_properties(parse_properties(NOWHERE))).heartbeats
    assert [f.name for f in beating] == ["A->B", "B->A"]  # (MM2 beats on disabled flows too)


# -- the CLI with a bad config: exit 2, one line naming key, value and rule ---------------


def run_cli(tmp_path: Path, text: str, *args: str) -> subprocess.CompletedProcess[str]:
    """gregor-mirror on an mm2.properties of `text` (it must exit without a cluster)."""
    config = tmp_path / "mm2.properties"
    config.write_text(text)
    return subprocess.run(
        [str(GREGOR_MIRROR), str(config), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (
            "emit.checkpoints.interval.seconds = -1",
            "emit.checkpoints.interval.seconds = '-1': must be at least 1",
        ),
        ("replication.factor = zero", "replication.factor = 'zero': must be an integer"),
        (
            "A->B.sync.group.offsets.enabled = no",
            "A->B.sync.group.offsets.enabled = 'no': must be true or false",
        ),
    ],
    ids=["negative-interval", "word-for-number", "word-for-boolean"],
)
def test_cli_bad_value(tmp_path: Path, line: str, message: str) -> None:
    done = run_cli(tmp_path, NOWHERE + line + "\n")
    assert done.returncode == 2
    assert done.stderr.splitlines() == [f"gregor-mirror: {message}"]  # no traceback
    assert done.stdout == ""


def test_cli_unknown_cluster_alias(tmp_path: Path) -> None:
    """--clusters names an alias that is not in `clusters`: exit 2, the alias named (and
    only the unknown one), before connecting anywhere."""
    done = run_cli(tmp_path, NOWHERE, "--clusters", "B", "C")
    assert done.returncode == 2
    assert done.stderr.splitlines() == ["gregor-mirror: --clusters C: not in clusters = A, B"]
    assert done.stdout == ""
