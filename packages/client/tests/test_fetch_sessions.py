"""The fetcher's side of KIP-227: what each request sends, and how responses move it on."""

from __future__ import annotations

from gregor.client.fetch_sessions import FetchSessionHandler, FetchSessionRequest
from gregor.protocol.apis.fetch import FetchPartition, FetchResponse
from gregor.protocol.errors import ErrorCode


def part(index: int, offset: int) -> FetchPartition:
    return FetchPartition(partition=index, fetch_offset=offset, partition_max_bytes=1024)


def sent(request: FetchSessionRequest) -> dict[tuple[str, int], int]:
    return {(t.topic, p.partition): p.fetch_offset for t in request.topics for p in t.partitions}


def test_full_then_incremental_then_back_to_full_on_session_errors() -> None:
    handler = FetchSessionHandler()
    wanted = {("a", 0): part(0, 5), ("a", 1): part(1, 9), ("b", 0): part(0, 0)}
    first = handler.build(wanted)
    assert (first.session_id, first.session_epoch, first.full) == (0, 0, True)
    assert sent(first) == {("a", 0): 5, ("a", 1): 9, ("b", 0): 0}
    assert handler.handle_response(first, FetchResponse(session_id=77))
    # Only what moved is sent; what is no longer wanted is forgotten.
    second = handler.build({("a", 0): part(0, 6), ("a", 1): part(1, 9)})
    assert (second.session_id, second.session_epoch, second.full) == (77, 1, False)
    assert sent(second) == {("a", 0): 6}
    assert [(f.topic, f.partitions) for f in second.forgotten] == [("b", [0])]
    assert handler.handle_response(second, FetchResponse(session_id=77))
    third = handler.build({("a", 0): part(0, 6), ("a", 1): part(1, 9)})
    assert (third.session_epoch, sent(third), third.forgotten) == (2, {}, [])
    # A wrong epoch: the next request is full and closes the session it names.
    error = FetchResponse(error_code=ErrorCode.INVALID_FETCH_SESSION_EPOCH, session_id=77)
    assert not handler.handle_response(third, error)
    fourth = handler.build({("a", 0): part(0, 6)})
    assert (fourth.session_id, fourth.session_epoch, sent(fourth)) == (77, 0, {("a", 0): 6})
    # An unknown session: the next request asks for a new one.
    unknown = FetchResponse(error_code=ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
    assert not handler.handle_response(fourth, unknown)
    assert handler.build({("a", 0): part(0, 6)}).session_id == 0


def test_a_broker_that_declines_sessions_gets_full_requests() -> None:
    handler = FetchSessionHandler()
    wanted = {("a", 0): part(0, 1)}
    for _ in range(3):
        request = handler.build(wanted)
        assert (request.session_id, request.session_epoch) == (0, 0)
        assert handler.handle_response(request, FetchResponse(session_id=0))
    old = handler.build(wanted, sessions=False)  # Fetch v0-6
    assert (old.session_id, old.session_epoch, sent(old)) == (0, -1, {("a", 0): 1})


def test_a_lost_connection_makes_the_next_request_full() -> None:
    handler = FetchSessionHandler()
    wanted = {("a", 0): part(0, 1)}
    handler.handle_response(handler.build(wanted), FetchResponse(session_id=5))
    handler.handle_error()
    request = handler.build(wanted)
    assert (request.session_id, request.session_epoch, sent(request)) == (5, 0, {("a", 0): 1})


def test_an_incremental_request_from_the_changes_alone() -> None:
    """`build_changed`: the partitions of the last request, of which the caller names those
    that may have moved; only those that did are sent. Before a session exists, or for a
    partition the session lacks, it declines, and `build` makes the request."""
    handler = FetchSessionHandler()
    assert handler.build_changed({("a", 0): part(0, 5)}) is None  # no session yet
    first = handler.build({("a", 0): part(0, 5), ("a", 1): part(1, 9)})
    assert handler.handle_response(first, FetchResponse(session_id=77))
    same = part(1, 9)  # equal, not identical: not sent
    second = handler.build_changed({("a", 0): part(0, 6), ("a", 1): same})
    assert second is not None
    assert (second.session_id, second.session_epoch, second.forgotten) == (77, 1, [])
    assert sent(second) == {("a", 0): 6}
    assert handler.handle_response(second, FetchResponse(session_id=77))
    assert handler.build_changed({("b", 0): part(0, 0)}) is None  # not in the session
    # What it recorded is what `build` compares with next.
    third = handler.build({("a", 0): part(0, 6), ("a", 1): part(1, 9)})
    assert (third.session_epoch, sent(third), third.forgotten) == (2, {}, [])
