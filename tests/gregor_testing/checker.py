"""The checker of a consume-transform-produce run (as Jepsen checks a history): what the
pipeline's transactions did, by their own account (`Ledger`), against what is in the
topics afterwards, read by kafka-python (a client no pipeline uses).

A pipeline copies each record of the source to the same partition of the sink, with the
same key, its value tagged with the transaction that wrote it (`tagged`). `check` then
says what is wrong:

- every source record is in the sink, read_committed, exactly once (none lost, none twice);
- in the source's order per key;
- no record of a transaction the pipeline aborted is visible to read_committed, and a
  committed transaction is visible whole (atomic);
- a read_uncommitted reader sees the records of the transactions aborted after their
  records were written (so the check above had something to catch).
"""

from __future__ import annotations

import threading
import time
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence

import attrs
from kafka import KafkaConsumer, TopicPartition
from kafka.errors import KafkaTimeoutError

from gregor.devcluster import LocalCluster, send_request
from gregor.protocol.apis.list_offsets import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsResponse,
    ListOffsetsTopic,
)
from gregor_testing.cluster import metadata

Record = tuple[bytes | None, bytes]  # (key, value)
TAG = b"@"


def tagged(value: bytes, tag: str) -> bytes:
    """The sink's value: the source's, and the transaction that wrote it."""
    return value + TAG + tag.encode()


def untagged(value: bytes) -> tuple[bytes, str]:
    source, _, tag = value.rpartition(TAG)
    return source, tag.decode()


class Ledger:
    """The pipeline's account of its transactions, by tag (thread safe): how many records
    each wrote, and how it ended as far as the pipeline knows (committed: commit returned;
    aborted: abort returned; neither: unknown, as after a fatal error)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.produced: dict[str, int] = {}
        self.committed: set[str] = set()
        self.aborted: set[str] = set()
        self.aborted_written: set[str] = set()  # aborted after every record was acked
        self.events: Counter[str] = Counter()  # what went wrong, and how often
        self._incarnations: Counter[str] = Counter()

    def wrote(self, tag: str, records: int) -> None:
        with self._lock:
            self.produced[tag] = records

    def commit(self, tag: str) -> None:
        with self._lock:
            self.committed.add(tag)

    def abort(self, tag: str, written: bool = False) -> None:
        with self._lock:
            self.aborted.add(tag)
            if written:
                self.aborted_written.add(tag)

    def incarnation(self, transactional_id: str) -> int:
        """The next number of a producer of the id, over every worker that ever had it (a
        worker replaced after a hang included), so the tags of its transactions are unique."""
        with self._lock:
            self._incarnations[transactional_id] += 1
            return self._incarnations[transactional_id]

    def event(self, what: str) -> None:
        with self._lock:
            self.events[what] += 1

    def committed_records(self) -> int:
        with self._lock:
            return sum(self.produced[t] for t in self.committed)


def read_records(
    cluster: LocalCluster, topic: str, partitions: int, isolation: str, timeout: float = 120.0
) -> dict[int, list[Record]]:
    """Every record of the topic up to its end offsets (the LSO for read_committed), by
    partition, read by kafka-python with `isolation` ("read_committed"/"read_uncommitted")."""
    consumer = KafkaConsumer(
        bootstrap_servers=cluster.bootstrap_servers,
        isolation_level=isolation,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        ends = _ends(consumer, cluster, topic, tps)
        out: dict[int, list[Record]] = {p: [] for p in range(partitions)}
        deadline = time.monotonic() + timeout
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            if time.monotonic() > deadline:
                raise TimeoutError(f"reading {topic} ({isolation}) timed out")
            for tp, records in consumer.poll(timeout_ms=200).items():
                out[tp.partition] += [(r.key, r.value) for r in records]
        return out
    finally:
        consumer.close()


def _ends(
    consumer: KafkaConsumer, cluster: LocalCluster, topic: str, tps: list[TopicPartition]
) -> dict[TopicPartition, int]:
    """kafka-python's end offsets; a timeout says what each broker answers for the topic."""
    try:
        return consumer.end_offsets(tps)
    except KafkaTimeoutError as e:
        views = brokers_views(cluster, topic)
        raise KafkaTimeoutError(f"{e}; {topic} as each broker sees it:\n{views}") from e


def brokers_views(cluster: LocalCluster, topic: str) -> str:
    """Each broker's Metadata answer for the topic and its ListOffsets (latest) answers, a
    line a broker: why a client could not learn where the topic ends."""
    lines = []
    for broker in cluster.brokers:
        try:
            meta = metadata(cluster, [topic], broker.broker_id)
            parts = [p for t in meta.topics if t.name == topic for p in t.partitions]
            asked = ListOffsetsRequest(
                replica_id=-1,
                topics=[ListOffsetsTopic(topic, [ListOffsetsPartition(p.partition_index, -1, -1)
                                                 for p in parts])],
            )  # fmt: skip
            offsets = send_request(broker.host, broker.port, asked, 5)
            assert isinstance(offsets, ListOffsetsResponse)
            answers = {
                p.partition_index: (p.error_code, p.offset) for p in offsets.topics[0].partitions
            }
            lines.append(
                f"broker {broker.broker_id}: "
                + "; ".join(
                    f"p{p.partition_index} leader {p.leader_id} epoch {p.leader_epoch} "
                    f"isr {p.isr_nodes} error {p.error_code} "
                    f"list_offsets {answers.get(p.partition_index)}"
                    for p in parts
                )
            )
        except (OSError, IndexError) as e:
            lines.append(f"broker {broker.broker_id}: {e!r}")
    return "\n".join(lines)


def end_offsets(cluster: LocalCluster, topic: str, partitions: int) -> dict[int, int]:
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap_servers)
    try:
        found = _ends(
            consumer, cluster, topic, [TopicPartition(topic, p) for p in range(partitions)]
        )
        return {tp.partition: offset for tp, offset in found.items()}
    finally:
        consumer.close()


def committed_offsets(cluster: LocalCluster, group: str, topic: str) -> dict[int, int]:
    """The group's committed offsets of the topic's partitions (those it has)."""
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap_servers, group_id=group)
    try:
        partitions = consumer.partitions_for_topic(topic) or set()
        found = {p: consumer.committed(TopicPartition(topic, p)) for p in partitions}
        return {p: offset for p, offset in found.items() if offset is not None}
    finally:
        consumer.close()


@attrs.define
class Report:
    problems: list[str] = attrs.field(factory=list)
    source_records: int = 0
    committed_records: int = 0
    uncommitted_records: int = 0
    aborted_visible_uncommitted: int = 0

    def problem(self, text: str, examples: Sequence[object] = ()) -> None:
        shown = f" (e.g. {list(examples)[:5]})" if examples else ""
        self.problems.append(text + shown)


def check(
    source: Mapping[int, Sequence[Record]],
    committed: Mapping[int, Sequence[Record]],
    uncommitted: Mapping[int, Sequence[Record]],
    ledger: Ledger,
) -> Report:
    """What is wrong with the run (`Report.problems`; empty: nothing)."""
    report = Report(
        source_records=sum(len(rs) for rs in source.values()),
        committed_records=sum(len(rs) for rs in committed.values()),
        uncommitted_records=sum(len(rs) for rs in uncommitted.values()),
    )
    tags_seen: Counter[str] = Counter()
    for partition, records in source.items():
        copied = [(key, *untagged(value)) for key, value in committed.get(partition, [])]
        tags_seen.update(tag for _, _, tag in copied)
        want = Counter(records)
        got = Counter((key, value) for key, value, _ in copied)
        lost, twice = want - got, got - want
        if lost:
            report.problem(f"partition {partition}: {sum(lost.values())} records lost", lost)
        if twice:
            report.problem(f"partition {partition}: {sum(twice.values())} extra copies", twice)
        by_key_in: dict[bytes | None, list[bytes]] = defaultdict(list)
        by_key_out: dict[bytes | None, list[bytes]] = defaultdict(list)
        for key, value in records:
            by_key_in[key].append(value)
        for key, value, _ in copied:
            by_key_out[key].append(value)
        disordered = [
            k for k in by_key_in if not lost and not twice and by_key_in[k] != by_key_out[k]
        ]
        if disordered:
            report.problem(f"partition {partition}: keys out of order", disordered)
    aborted_read = sorted(tag for tag in tags_seen if tag in ledger.aborted)
    if aborted_read:
        report.problem("records of aborted transactions read_committed", aborted_read)
    partial = sorted(
        tag for tag, count in tags_seen.items() if count != ledger.produced.get(tag, -1)
    )
    if partial:
        report.problem("transactions visible in part (or written twice)", partial)
    missing = sorted(tag for tag in ledger.committed if tag not in tags_seen)
    if missing:
        report.problem("committed transactions not visible", missing)
    seen_uncommitted: Counter[str] = Counter(
        untagged(value)[1] for records in uncommitted.values() for _, value in records
    )
    report.aborted_visible_uncommitted = sum(seen_uncommitted[t] for t in ledger.aborted)
    unseen = sorted(t for t in ledger.aborted_written if seen_uncommitted[t] != ledger.produced[t])
    if unseen:
        report.problem("aborted transactions' records missing read_uncommitted", unseen)
    return report
