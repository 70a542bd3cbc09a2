"""`gregor dump-log` on a real broker's log directory: the record counts of every segment add
up to what was produced (idempotent batches, an aborted and a committed transaction), the
payloads read back, the indexes verify against their segments, the producer snapshots name
the producer, the .txnindex holds the aborted transaction; a corrupted copy is caught."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from tools.helpers import gregor

from gregor.client import Producer
from gregor.devcluster import LocalCluster
from gregor_testing.cluster import create_topic, unique_topic

RECORDS = 600


def dump(*args: str, check: bool = True) -> Any:
    return json.loads(gregor("dump-log", *args, "--json", check=check).stdout)


def test_counts_indexes_snapshots_and_txnindex(tools_cluster: LocalCluster, tmp_path: Path) -> None:
    topic = unique_topic("cli-dump")
    # One replica, on broker 0; small segments (several rolls, each with a producer
    # snapshot) and an index entry every 256 bytes.
    create_topic(
        tools_cluster,
        topic,
        assignment={0: [0]},
        configs={"segment.bytes": "4096", "index.interval.bytes": "256"},
    )
    servers = tools_cluster.bootstrap_servers
    # Batches of at most 1 KiB, which a 4 KiB segment holds.
    with Producer({"bootstrap.servers": servers, "linger.ms": "5", "batch.size": "1024"}) as plain:
        futures = [plain.produce(topic, b"plain-%04d" % i, key=b"k%d" % i) for i in range(RECORDS)]
        plain.flush(60)
    assert sorted(f.result(0).offset for f in futures) == list(range(RECORDS))
    config = {"bootstrap.servers": servers, "transactional.id": unique_topic("cli-txn")}
    with Producer(config) as txn:
        txn.init_transactions()
        txn.begin_transaction()
        for i in range(5):
            txn.produce(topic, b"aborted-%d" % i)
        txn.flush(60)
        txn.abort_transaction()
        txn.begin_transaction()
        for i in range(5):
            txn.produce(topic, b"committed-%d" % i)
        txn.commit_transaction()

    log_dir = tools_cluster.broker(0).data_dir / f"{topic}-0"
    logs = sorted(log_dir.glob("*.log"))
    assert len(logs) > 2, "segments should have rolled"
    documents = dump("--files", ",".join(map(str, logs)), "--print-data-log")
    batches = [b for d in documents for b in d["batches"]]
    assert all(b["is_valid"] for b in batches)
    data = [r for b in batches if not b["is_control"] for r in b["records"]]
    control = [r for b in batches if b["is_control"] for r in b["records"]]
    # Every record produced, once, in offset order; the two markers.
    assert sum(d["record_count"] for d in documents) == RECORDS + 10 + 2
    assert [r["payload"] for r in data] == (
        [f"plain-{i:04d}" for i in range(RECORDS)]
        + [f"aborted-{i}" for i in range(5)]
        + [f"committed-{i}" for i in range(5)]
    )
    # Offsets run without a gap across the segments, the two markers included.
    every = [r["offset"] for b in batches for r in b["records"]]
    assert every == list(range(RECORDS + 12))
    assert [r["control"].split()[0] for r in control] == ["ABORT", "COMMIT"]
    assert data[0]["key"] == "k0"
    producer_ids = {b["producer_id"] for b in batches if b["is_transactional"]}
    assert len(producer_ids) == 1
    [txn_producer] = producer_ids

    # Kafka's lines, as text.
    text = gregor("dump-log", "--files", str(logs[0])).stdout
    assert text.startswith(f"Dumping {logs[0]}\nbaseOffset: 0 lastOffset: ")
    assert "compresscodec: none" in text and "isvalid: true" in text

    # The indexes point at the batches they name.
    indexes = sorted(log_dir.glob("*.index")) + sorted(log_dir.glob("*.timeindex"))
    checked = dump("--files", ",".join(map(str, indexes)), "--verify-index-only")
    assert all(d["mismatches"] == [] for d in checked)
    assert sum(len(d["entries"]) for d in checked if d["kind"] == "index") > 0

    snapshots = sorted(log_dir.glob("*.snapshot"))
    assert snapshots
    # Each snapshot (taken at a roll) holds producers of the batches before its offset.
    for found in dump("--files", ",".join(map(str, snapshots))):
        assert found["crc_valid"]
        at = int(Path(found["file"]).stem)
        for p in found["producers"]:
            mine = [b["last_offset"] for b in batches if b["producer_id"] == p["producer_id"]]
            assert p["last_offset"] < at and p["last_offset"] in [*mine, -1]  # -1: no batch kept

    aborted = [
        a
        for d in dump("--files", ",".join(map(str, sorted(log_dir.glob("*.txnindex")))))
        for a in d["aborted"]
    ]
    first_aborted = next(r["offset"] for r in data if r["payload"] == "aborted-0")
    assert [(a["producer_id"], a["first_offset"]) for a in aborted] == [
        (txn_producer, first_aborted)
    ]

    # A flipped byte in a copy of a segment: that batch fails its CRC, exit status 1.
    broken = tmp_path / logs[0].name
    shutil.copy(logs[0], broken)
    raw = bytearray(broken.read_bytes())
    raw[100] ^= 0xFF
    broken.write_bytes(raw)
    done = gregor("dump-log", "--files", str(broken), "--json", check=False)
    assert done.returncode == 1
    [found] = json.loads(done.stdout)
    assert [b["is_valid"] for b in found["batches"]].count(False) == 1


def test_bad_files_are_one_line(tmp_path: Path) -> None:
    missing = gregor("dump-log", "--files", str(tmp_path / "00000000000000000000.log"), check=False)
    assert missing.returncode == 1 and missing.stderr.startswith("gregor: error: cannot read")
    other = tmp_path / "notes.txt"
    other.write_text("hello")
    wrong = gregor("dump-log", "--files", str(other), check=False)
    assert wrong.returncode == 1 and "not a .log" in wrong.stderr
