"""The checker of a Jepsen-style history (no processes): it finds each kind of anomaly it
reports, and nothing in a clean history."""

from __future__ import annotations

from pathlib import Path

import pytest

from gregor.protocol.records import BatchBuilder
from gregor.storage import LogConfig, open_log
from gregor_testing.evidence import resent_across_epochs
from gregor_testing.faultruns import Summary, copy_history, table
from gregor_testing.history import GAP, History, Report, check, unavailable
from gregor_testing.schedules import schedule, service_schedule


def write(path: Path, events: list[tuple[str, dict[str, object]]]) -> Report:
    history = History(path)
    for op, fields in events:
        history.write(op, **fields)
    history.close()
    return check(path)


def sent(*ids: str) -> list[tuple[str, dict[str, object]]]:
    return [("send", {"id": i, "key": "k", "producer": i.split(":")[0]}) for i in ids]


def ack(record_id: str, partition: int, offset: int | None) -> tuple[str, dict[str, object]]:
    return ("ack", {"id": record_id, "partition": partition, "offset": offset})


def read(record_id: str, partition: int, offset: int) -> tuple[str, dict[str, object]]:
    return ("read", {"id": record_id, "partition": partition, "offset": offset})


def test_a_clean_history_has_nothing_wrong(tmp_path: Path) -> None:
    events = [*sent("p0:0", "p0:1", "p1:0"), ack("p0:0", 0, 0), ack("p1:0", 0, None)]
    events += [("error", {"id": "p0:1", "error": "_MSG_TIMED_OUT"})]
    # p0:1 failed on the client, yet was written: read, neither lost nor phantom. p1:0's
    # acknowledgement names no offset (librdkafka's inferred ones): it is not misplaced.
    events += [read("p0:0", 0, 0), read("p1:0", 0, 1), read("p0:1", 0, 2)]
    report = write(tmp_path / "h.jsonl", events)
    assert (report.sent, report.acked, report.errors, report.read) == (3, 2, 1, 3)
    assert report.ok and not report.misplaced


def test_each_anomaly_is_found(tmp_path: Path) -> None:
    events = [*sent("p0:0", "p0:1", "p0:2", "p0:3")]
    events += [ack(f"p0:{n}", 0, n) for n in range(4)]
    # p0:0 lost, p0:2 read twice, p0:3 before p0:1, x:9 never sent, p0:1 at offset 5.
    events += [read("p0:3", 0, 3), read("p0:1", 0, 5), read("p0:2", 0, 6), read("p0:2", 0, 7)]
    events += [read("x:9", 0, 8)]
    report = write(tmp_path / "h.jsonl", events)
    assert report.lost == ["p0:0"]
    assert report.duplicates == ["p0:2"]
    assert report.reordered == ["p0:1"]
    assert report.phantom == ["x:9"]
    assert report.misplaced == ["p0:1", "p0:2"]
    assert not report.ok


BUMP = (
    "%7|1795877879.786|ERRSEQ|rdkafka#producer-2| [thrd:b1:9092/1]: b1:9092/1: ProduceRequest "
    "for t [0] with 1 message(s) failed due to skipped sequence numbers (PID{Id:7,Epoch:0}, "
    "base seq 2 > next seq 1) caused by previous failed request (NOT_LEADER_FOR_PARTITION, "
    "actions Refresh,MsgNotPersisted, base seq 1..1, base msgid 2, 4581ms ago): recovering"
)


@pytest.mark.parametrize(
    ("second_epoch", "producer_log", "resent"),
    [(1, BUMP, True), (0, BUMP, False), (1, "", False)],
    ids=["new-epoch-after-the-bump", "same-epoch", "no-bump-logged"],
)
def test_a_record_sent_again_under_a_new_epoch_is_set_aside(
    tmp_path: Path, second_epoch: int, producer_log: str, resent: bool
) -> None:
    """librdkafka#4953: p0:1 failed (NOT_LEADER after its leader wrote it), the producer
    bumped its epoch on the OUT_OF_ORDER_SEQUENCE_NUMBER behind it and sent p0:1 again from
    sequence 0: two batches no broker can tell apart. Within one epoch the copies stay a
    duplicate, and so they do without librdkafka's word for the bump."""
    log = open_log(tmp_path / "b1" / "t-0", LogConfig.from_properties({}), recovery_point=0)
    batches = [(0, 0, "p0:0"), (0, 1, "p0:1"), (second_epoch, 0 if second_epoch else 2, "p0:1")]
    for epoch, sequence, value in batches:
        builder = BatchBuilder(producer_id=7, producer_epoch=epoch, base_sequence=sequence)
        builder.append(value.encode(), key=b"k")
        log.append_as_leader(builder.build(), leader_epoch=1)
    log.close()
    (tmp_path / "producer.log").write_text(producer_log + "\n")
    events = [*sent("p0:0", "p0:1"), ack("p0:0", 0, 0), ack("p0:1", 0, 2)]
    events += [read("p0:0", 0, 0), read("p0:1", 0, 1), read("p0:1", 0, 2)]
    history = tmp_path / "history-1.jsonl"
    report = write(history, events)
    assert (report.duplicates, report.misplaced) == (["p0:1"], ["p0:1"])
    found = resent_across_epochs(
        history, ["p0:1"], "t", [tmp_path / "b1"], tmp_path / "producer.log"
    )
    report.set_aside(found)
    if resent:
        assert (report.resent, report.duplicates, report.misplaced) == (["p0:1"], [], [])
        assert report.ok
        row = Summary.of(1, 2, ["isolate(b1)"], report, history)
        assert row.ok and row == Summary.load(save(row, tmp_path))  # set aside when re-read
        assert table([row]).splitlines()[-1].endswith("resent=1")
    else:
        assert (report.resent, report.duplicates) == ([], ["p0:1"])
        assert not report.ok


def test_unavailability_counts_only_silences_longer_than_the_gap() -> None:
    assert unavailable(0.0, 10.0, [0.5, 1.0, 1.2]) == pytest.approx(10.0 - 1.2)
    assert unavailable(0.0, 3.0, [0.5 * n for n in range(7)]) == 0.0
    assert unavailable(0.0, 4.0, [GAP / 2, 3.5, 4.0]) == pytest.approx(3.5 - GAP / 2)


def test_a_schedule_is_the_same_for_a_seed_and_stays_inside_the_run() -> None:
    hosts = ["zk1", "zk2", "zk3", "b1", "b2", "b3"]
    first = schedule(7, 30, hosts, faults=6)
    assert first == schedule(7, 30, hosts, faults=6) != schedule(8, 30, hosts, faults=6)
    assert all(f.at >= 0 and f.at + f.seconds <= 30 * 0.8 + 1e-9 for f in first)
    assert all(f.seconds >= 8 for f in first if f.kind == "pause")


def test_service_faults_are_drawn_apart_and_strike_the_etl_once_it_loads() -> None:
    services = {"dc1-etl": "etl", "dc2-mirror": "mirror"}
    drawn = [f for seed in range(40) for f in service_schedule(seed, 20, services, 3)]
    assert drawn[:3] == service_schedule(0, 20, services, 3)
    assert {(f.kind, f.hosts) for f in drawn} == {
        ("kill", ("dc1-etl",)), ("pause", ("dc1-etl",)), ("isolate", ("dc1-etl",)),
        ("kill", ("dc2-mirror",)),
        ("pause", ("dc2-mirror",)), ("restart", ("dc2-mirror",)), ("wan", ()),
    }  # fmt: skip
    assert all(f.at >= 0 and f.at + f.seconds <= 20 * 0.8 + 1e-9 for f in drawn)
    assert all(f.at >= 20 * 0.4 for f in drawn if f.hosts == ("dc1-etl",))


def test_the_copies_counts_join_the_table_and_its_total(tmp_path: Path) -> None:
    events = [*sent("p0:0", "p0:1"), ack("p0:0", 0, 0), ack("p0:1", 0, 1)]
    history = tmp_path / "history-1.jsonl"
    dc1 = write(history, [*events, read("p0:0", 0, 0), read("p0:1", 0, 1)])
    mirror = write(copy_history(history, "mirror"), [*events, read("p0:0", 0, 7)])
    row = Summary.of(1, 2, ["wan()"], dc1, history, {"mirror": mirror})
    assert not row.ok
    assert row == Summary.load(save(row, tmp_path))
    lines = table([row]).splitlines()
    assert "m:lost/dup/reord/phant" in lines[0] and "1/0/0/0" in lines[1]
    assert lines[-1].endswith(
        "mirror_read=1 mirror_lost=1 mirror_duplicates=0 mirror_reordered=0 mirror_phantom=0"
    )


def save(row: Summary, directory: Path) -> Path:
    row.save(directory)
    return directory / f"run-{row.number}.json"
