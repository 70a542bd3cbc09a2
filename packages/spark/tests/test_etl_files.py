"""gregor-etl's clean-up before a rerun: the data files the file sink's log lists stay,
whatever spelling of their path the log has, and only what a killed attempt left goes."""

from __future__ import annotations

import json
from pathlib import Path

from gregor.spark.etl import committed_files, remove_uncommitted


def write_log(table: Path, batch: int, entries: list[dict[str, object]]) -> None:
    log = table / "_spark_metadata"
    log.mkdir(parents=True, exist_ok=True)
    lines = ["v1", *(json.dumps(e) for e in entries)]
    (log / str(batch)).write_text("\n".join(lines) + "\n")


def part(table: Path, name: str) -> Path:
    path = table / "date=2026-11-28" / "hour=07" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"PAR1")
    return path


def test_paths_in_every_spelling_of_the_log_are_kept(tmp_path: Path) -> None:
    # A warehouse with a space (percent-encoded in the log's URIs) reached by a symlink.
    real = tmp_path / "ware house"
    link = tmp_path / "link"
    real.mkdir()
    link.symlink_to(real, target_is_directory=True)
    table = link / "orders"
    kept = [part(table, f"part-{i}.parquet") for i in range(3)]
    dropped = part(table, "part-9.parquet")  # a killed attempt's, not in the log
    deleted = part(table, "part-8.parquet")  # listed, then compacted away by the log
    quoted = str(table).replace(" ", "%20")
    write_log(
        table,
        0,
        [
            {"path": f"file://{quoted}/date=2026-11-28/hour=07/part-0.parquet", "action": "add"},
            {"path": f"file:{quoted}/date=2026-11-28/hour=07/part-1.parquet", "action": "add"},
            {"path": f"file://{quoted}/date=2026-11-28/hour=07/part-8.parquet", "action": "add"},
        ],
    )
    write_log(
        table,
        1,
        [
            {"path": f"{table}/date=2026-11-28/hour=07/part-2.parquet", "action": "add"},
            {"path": f"file://{quoted}/date=2026-11-28/hour=07/part-8.parquet", "action": "delete"},
        ],
    )
    (table / "_spark_metadata" / ".1.tmp").write_text("not a batch")
    assert committed_files(table) == {str(p.resolve()) for p in kept}
    assert sorted(remove_uncommitted(table)) == sorted([dropped, deleted])
    assert all(p.exists() for p in kept) and not dropped.exists() and not deleted.exists()


def test_a_table_without_a_log_has_nothing_committed(tmp_path: Path) -> None:
    assert committed_files(tmp_path / "none") == set()
    assert remove_uncommitted(tmp_path / "none") == []
