"""The transaction index: 34-byte entries, collection for read_committed, truncation."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from gregor.storage.index import CorruptIndexError
from gregor.storage.txn_index import AbortedTxn, TransactionIndex


def test_format_and_reload(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.txnindex"
    index = TransactionIndex(path, 0)
    assert not path.exists()  # created with the first aborted transaction
    index.append(AbortedTxn(7, 10, 20, 10))
    index.append(AbortedTxn(8, 15, 30, 21))
    index.close()
    assert path.read_bytes() == struct.pack(">hqqqq", 0, 7, 10, 20, 10) + struct.pack(
        ">hqqqq", 0, 8, 15, 30, 21
    )
    assert TransactionIndex(path, 0).entries == [
        AbortedTxn(7, 10, 20, 10),
        AbortedTxn(8, 15, 30, 21),
    ]


def test_collect_overlapping(tmp_path: Path) -> None:
    index = TransactionIndex(tmp_path / "a.txnindex", 0)
    index.extend([AbortedTxn(1, 0, 5, 0), AbortedTxn(2, 3, 12, 6), AbortedTxn(3, 20, 25, 13)])
    found, complete = index.collect(6, 15)
    assert found == [AbortedTxn(2, 3, 12, 6)] and not complete
    found, complete = index.collect(0, 13)
    assert found == [AbortedTxn(1, 0, 5, 0), AbortedTxn(2, 3, 12, 6)] and complete


def test_truncate_and_torn_entry(tmp_path: Path) -> None:
    path = tmp_path / "a.txnindex"
    index = TransactionIndex(path, 0)
    index.extend([AbortedTxn(1, 0, 5, 0), AbortedTxn(2, 6, 9, 6)])
    index.truncate_to(9)
    assert index.entries == [AbortedTxn(1, 0, 5, 0)]
    assert path.stat().st_size == 34
    with path.open("ab") as f:
        f.write(b"\x00" * 10)  # a crash in the middle of an append
    assert TransactionIndex(path, 0).entries == [AbortedTxn(1, 0, 5, 0)]
    assert path.stat().st_size == 34


def test_errors(tmp_path: Path) -> None:
    index = TransactionIndex(tmp_path / "a.txnindex", 100)
    index.append(AbortedTxn(1, 90, 95, 90))
    with pytest.raises(CorruptIndexError, match="before the segment"):
        index.sanity_check()
    with pytest.raises(CorruptIndexError, match="not after"):
        index.append(AbortedTxn(1, 90, 95, 90))
    bad = tmp_path / "b.txnindex"
    bad.write_bytes(struct.pack(">hqqqq", 3, 1, 2, 3, 4))
    with pytest.raises(CorruptIndexError, match="version 3"):
        _ = TransactionIndex(bad, 0).entries
