"""Offset syncs and exact translation: what the syncs of a copy say, and where a committed
source offset lands on the target."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gregor.client import TopicPartition
from gregor.mirror import OffsetSync, translate
from gregor.mirror.flow import boundaries
from gregor.mirror.offset_sync import SyncStore

TP = TopicPartition("t", 0)


def test_translation_is_exact_across_source_gaps() -> None:
    # Records 0..9 and 12..20 (10 and 11 are transaction markers), copied to 0..18.
    syncs = [(0, 0), (9, 9), (12, 10), (20, 18)]
    assert translate(syncs, 0) == 0
    assert translate(syncs, 5) == 5
    assert translate(syncs, 9) == 9
    assert translate(syncs, 10) == 10  # the next record is 12, at 10
    assert translate(syncs, 11) == 10
    assert translate(syncs, 12) == 10
    assert translate(syncs, 15) == 13
    assert translate(syncs, 21) == 19  # caught up
    assert translate(syncs, 30) == 19  # ahead of the copy: where the next record lands


def test_before_the_first_sync_there_is_no_translation() -> None:
    assert translate([(100, 0)], 99) is None
    assert translate([], 0) is None


def test_store_keeps_run_boundaries_and_replaces_on_restart() -> None:
    store = SyncStore()
    store.add_all(OffsetSync(TP, u, d) for u, d in [(0, 0), (4, 4), (9, 9), (12, 10)])
    assert store.of(TP) == [(0, 0), (9, 9), (12, 10)]  # (4, 4) says nothing new
    # A restarted mirror copies 10.. again, after what it wrote: 12 now lands at 15.
    store.add(OffsetSync(TP, 12, 15))
    assert store.of(TP) == [(0, 0), (9, 9), (12, 15)]
    assert store.translate(TP, 13) == 16
    assert store.last(TP) == (12, 15)


def singles(upstream: list[int], downstream: list[int]) -> list[tuple[int, int, int]]:
    """Records produced one by one: a run each."""
    return [(u, d, 1) for u, d in zip(upstream, downstream, strict=True)]


def test_boundaries_of_chunks() -> None:
    assert boundaries(None, singles([0, 1, 2], [0, 1, 2])) == [(0, 0), (2, 2)]
    assert boundaries((2, 2), singles([3, 4], [3, 4])) == [(4, 4)]
    assert boundaries((2, 2), singles([3], [3])) == [(3, 3)]
    assert boundaries(None, singles([5], [0])) == [(5, 0)]
    assert boundaries((2, 2), singles([5, 6, 9], [3, 4, 5])) == [(5, 3), (6, 4), (9, 5)]
    # A retried batch written twice on the target: the jump is downstream.
    assert boundaries(None, singles([0, 1, 2, 3], [0, 1, 4, 5])) == [
        (0, 0),
        (1, 1),
        (2, 4),
        (3, 5),
    ]


def test_boundaries_of_batches_passed_through() -> None:
    # Batches of 100 and 50 records back to back, then one after a transaction marker.
    runs = [(0, 0, 100), (100, 100, 50), (151, 150, 10)]
    assert boundaries(None, runs) == [(0, 0), (149, 149), (151, 150), (160, 159)]
    assert boundaries((160, 159), [(161, 160, 5)]) == [(165, 164)]
    # Batches mixed with records produced one by one (a refused record left out).
    assert boundaries((165, 164), [(166, 165, 2), (168, 167, 1), (170, 168, 3)]) == [
        (168, 167),
        (170, 168),
        (172, 170),
    ]


@st.composite
def copies(draw: st.DrawFn) -> tuple[list[int], list[list[int]]]:
    """Source record offsets with gaps, cut into fetched chunks."""
    gaps = draw(st.lists(st.integers(1, 4), min_size=1, max_size=60))
    upstream = [sum(gaps[: i + 1]) for i in range(len(gaps))]
    cuts = sorted(draw(st.sets(st.integers(1, len(upstream)), max_size=8)) | {len(upstream)})
    chunks, start = [], 0
    for cut in cuts:
        if cut > start:
            chunks.append(upstream[start:cut])
            start = cut
    return upstream, chunks


@given(copies(), st.integers(0, 5))
def test_every_committed_offset_translates_to_the_next_record(
    copy: tuple[list[int], list[list[int]]], start: int
) -> None:
    """Whatever the gaps and chunks, a consumer that committed offset U on the source
    resumes on the target exactly at the copy of the first record at or after U."""
    upstream, chunks = copy
    store, previous, downstream = SyncStore(), None, start
    where: dict[int, int] = {}
    for chunk in chunks:
        down = list(range(downstream, downstream + len(chunk)))
        downstream += len(chunk)
        store.add_all(OffsetSync(TP, u, d) for u, d in boundaries(previous, singles(chunk, down)))
        previous = (chunk[-1], down[-1])
        where.update(zip(chunk, down, strict=True))
    for committed in range(upstream[0], upstream[-1] + 2):
        after = [u for u in upstream if u >= committed]
        expected = where[after[0]] if after else downstream
        assert store.translate(TP, committed) == expected
