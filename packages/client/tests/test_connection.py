"""BrokerConnection against a scripted peer speaking the real protocol over loopback TCP.

The peer is the other end of the wire, not a mock of the client: it parses our frames with
gregor-protocol and answers as a broker would, or misbehaves on purpose (old ApiVersions,
wrong correlation ids, silence, hang-ups).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import trio

from gregor.client.connection import BrokerConnection, ConnectionConfig
from gregor.protocol.apis.api_versions import ApiVersion, ApiVersionsRequest, ApiVersionsResponse
from gregor.protocol.apis.metadata import MetadataRequest, MetadataResponse
from gregor.protocol.errors import NetworkError, RequestTimedOutError, UnsupportedVersionError
from gregor.protocol.framing import FrameReader, decode_request, encode_response
from gregor.protocol.schema import Request, Response

Handler = Callable[[Request, int, int], Awaitable[Response | None]]


class Peer:
    """A loopback server answering each request through `handler` (None: no answer)."""

    def __init__(self, api_versions_max: int = 4, metadata_max: int = 12) -> None:
        self.api_versions_max = api_versions_max
        self.metadata_max = metadata_max
        self.seen: list[tuple[str, int, int]] = []  # (request, version, correlation id)
        self.outstanding = 0
        self.max_outstanding = 0
        self.handler: Handler = self.default
        self.reorder = False
        self.hang_up = False

    async def default(self, body: Request, version: int, correlation_id: int) -> Response | None:
        if isinstance(body, ApiVersionsRequest):
            keys = [ApiVersion(18, 0, self.api_versions_max), ApiVersion(3, 0, self.metadata_max)]
            if version > self.api_versions_max:
                return ApiVersionsResponse(error_code=35, api_keys=keys[:1])
            return ApiVersionsResponse(api_keys=keys)
        return MetadataResponse(cluster_id=f"answer-{correlation_id}")

    async def silent(self, body: Request, version: int, correlation_id: int) -> Response | None:
        """Answers ApiVersions, never Metadata."""
        if isinstance(body, MetadataRequest):
            return None
        return await self.default(body, version, correlation_id)

    async def serve(self, stream: trio.SocketStream) -> None:
        reader = FrameReader(1 << 20)
        previous = trio.Event()
        previous.set()
        async with trio.open_nursery() as nursery:
            while data := await stream.receive_some(65536):
                reader.feed(data)
                while (frame := reader.next_frame()) is not None:
                    header, body = decode_request(frame)
                    if self.hang_up and isinstance(body, MetadataRequest):
                        await stream.aclose()
                        return
                    self.seen.append(
                        (type(body).__name__, header.request_api_version, header.correlation_id)
                    )
                    done = trio.Event()
                    nursery.start_soon(self.answer, stream, header, body, previous, done)
                    previous = done

    async def answer(
        self,
        stream: trio.SocketStream,
        header: Any,
        body: Request,
        turn: trio.Event,
        done: trio.Event,
    ) -> None:
        """Work on requests concurrently, but answer them in order, as a broker does."""
        self.outstanding += 1
        self.max_outstanding = max(self.max_outstanding, self.outstanding)
        version, correlation_id = header.request_api_version, header.correlation_id
        response = await self.handler(body, version, correlation_id)
        self.outstanding -= 1
        await turn.wait()
        if response is None:
            done.set()
            return
        answer_version = (
            0 if isinstance(response, ApiVersionsResponse) and response.error_code else version
        )
        if self.reorder:
            correlation_id += 1000
        await stream.send_all(encode_response(response, answer_version, correlation_id))
        done.set()


async def start_peer(nursery: trio.Nursery, peer: Peer) -> int:
    listeners = await nursery.start(trio.serve_tcp, peer.serve, 0)
    return int(listeners[0].socket.getsockname()[1])


async def connect(nursery: trio.Nursery, port: int, **config: Any) -> BrokerConnection:
    return await BrokerConnection.open(nursery, "127.0.0.1", port, ConnectionConfig(**config))


async def test_negotiates_the_highest_common_versions() -> None:
    peer = Peer(api_versions_max=4, metadata_max=9)
    async with trio.open_nursery() as nursery:
        port = await start_peer(nursery, peer)
        conn = await connect(nursery, port)
        assert conn.broker_versions[3] == (0, 9)
        assert conn.version_for(MetadataRequest) == 9
        assert conn.version_for(MetadataRequest, max_version=4) == 4
        response = await conn.request(MetadataRequest(topics=None))
        assert isinstance(response, MetadataResponse)
        assert response.cluster_id == "answer-1"
        assert peer.seen == [("ApiVersionsRequest", 4, 0), ("MetadataRequest", 9, 1)]
        with pytest.raises(UnsupportedVersionError, match="does not support Produce"):
            from gregor.protocol.apis.produce import ProduceRequest

            conn.version_for(ProduceRequest)
        await conn.aclose()
        nursery.cancel_scope.cancel()


async def test_falls_back_when_the_broker_has_an_older_api_versions() -> None:
    peer = Peer(api_versions_max=2)
    async with trio.open_nursery() as nursery:
        port = await start_peer(nursery, peer)
        conn = await connect(nursery, port)
        # Asked at v4, answered with error 35 in a v0 body naming v2, asked again at v2.
        assert [(name, version) for name, version, _ in peer.seen] == [
            ("ApiVersionsRequest", 4),
            ("ApiVersionsRequest", 2),
        ]
        assert conn.broker_versions[18] == (0, 2)
        await conn.aclose()
        nursery.cancel_scope.cancel()


async def test_requests_are_pipelined_up_to_max_in_flight() -> None:
    peer = Peer()
    release = trio.Event()

    async def slow(body: Request, version: int, correlation_id: int) -> Response | None:
        if isinstance(body, MetadataRequest):
            await release.wait()
        return await peer.default(body, version, correlation_id)

    async with trio.open_nursery() as nursery:
        port = await start_peer(nursery, peer)
        conn = await connect(nursery, port, max_in_flight=3)
        peer.handler = slow
        answers: list[str | None] = []

        async def one() -> None:
            answers.append(
                (await conn.request(MetadataRequest(), response_type=MetadataResponse)).cluster_id
            )

        async with trio.open_nursery() as clients:
            for _ in range(7):
                clients.start_soon(one)
            with trio.fail_after(10):
                while peer.outstanding < 3:
                    await trio.sleep(0.01)
            await trio.testing.wait_all_tasks_blocked(0.05)
            assert peer.outstanding == 3  # the fourth waits for a free slot
            release.set()
        assert peer.max_outstanding == 3
        assert sorted(answers) == sorted(f"answer-{i}" for i in range(1, 8))
        await conn.aclose()
        nursery.cancel_scope.cancel()


async def test_a_cancelled_caller_sends_nothing_and_the_connection_stays_usable() -> None:
    peer = Peer()
    async with trio.open_nursery() as nursery:
        port = await start_peer(nursery, peer)
        conn = await connect(nursery, port, max_in_flight=1)
        with trio.CancelScope() as scope:
            scope.cancel()
            await conn.request(MetadataRequest())
        assert scope.cancelled_caught
        # Nothing went out and the one slot is free: the next request has correlation id 1.
        response = await conn.request(MetadataRequest(), response_type=MetadataResponse)
        assert response.cluster_id == "answer-1"
        assert [name for name, _, _ in peer.seen] == ["ApiVersionsRequest", "MetadataRequest"]
        await conn.aclose()
        nursery.cancel_scope.cancel()


async def test_a_request_cancelled_while_another_is_written_gives_back_its_slot() -> None:
    """A request takes an in-flight slot, then waits while another request is being
    written; cancelled there, it gives the slot back and sends nothing."""
    peer = Peer()
    async with trio.open_nursery() as nursery:
        port = await start_peer(nursery, peer)
        conn = await connect(nursery, port, max_in_flight=2)
        writing = conn._send_lock  # held as if another request's frame were being written
        await writing.acquire()
        async with trio.open_nursery() as waiting:
            waiting.start_soon(conn.request, MetadataRequest())
            await trio.testing.wait_all_tasks_blocked(0.05)
            assert conn._slots.value == 1  # the waiting request holds one slot
            waiting.cancel_scope.cancel()
        assert conn._slots.value == 2
        writing.release()
        async with trio.open_nursery() as clients:
            for _ in range(2):  # both slots are usable
                clients.start_soon(conn.request, MetadataRequest())
        # The cancelled request never went out.
        assert [name for name, _, _ in peer.seen] == [
            "ApiVersionsRequest",
            "MetadataRequest",
            "MetadataRequest",
        ]
        await conn.aclose()
        nursery.cancel_scope.cancel()


async def test_a_request_without_answer_times_out_and_closes_the_connection() -> None:
    peer = Peer()

    async with trio.open_nursery() as nursery:
        port = await start_peer(nursery, peer)
        conn = await connect(nursery, port)
        peer.handler = peer.silent
        errors: list[Exception] = []

        async def other() -> None:
            try:
                await conn.request(MetadataRequest(), timeout=30)
            except NetworkError as exc:
                errors.append(exc)

        nursery.start_soon(other)
        await trio.testing.wait_all_tasks_blocked(0.05)
        with pytest.raises(RequestTimedOutError, match=r"no response within 0\.2s"):
            await conn.request(MetadataRequest(), timeout=0.2)
        assert conn.closed
        with trio.fail_after(5):
            while not errors:
                await trio.sleep(0.01)
        assert isinstance(errors[0], NetworkError)  # the other in-flight request failed too
        with pytest.raises(NetworkError, match="closed"):
            await conn.request(MetadataRequest())
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize("caller_reads", [False, True])
async def test_an_out_of_order_correlation_id_closes_the_connection(caller_reads: bool) -> None:
    peer = Peer()
    async with trio.open_nursery() as nursery:
        port = await start_peer(nursery, peer)
        conn = await connect(nursery, port, caller_reads=caller_reads)
        peer.reorder = True
        with pytest.raises(NetworkError, match="correlation id 1001, expected 1"):
            await conn.request(MetadataRequest())
        assert conn.closed
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize("caller_reads", [False, True])
async def test_a_peer_that_hangs_up_fails_requests_with_network_error(caller_reads: bool) -> None:
    peer = Peer()
    async with trio.open_nursery() as nursery:
        port = await start_peer(nursery, peer)
        conn = await connect(nursery, port, caller_reads=caller_reads)
        peer.hang_up = True
        with pytest.raises(NetworkError, match="closed the connection"):
            await conn.request(MetadataRequest())
        assert conn.closed
        nursery.cancel_scope.cancel()


class _Steps(trio.abc.Instrument):
    """The names of the tasks that ran, one entry a step."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self.names.append(task.name)


async def test_a_caller_that_reads_is_answered_with_no_reader_task() -> None:
    peer = Peer()
    async with trio.open_nursery() as nursery:
        port = await start_peer(nursery, peer)
        conn = await connect(nursery, port, caller_reads=True, max_in_flight=1)
        steps = _Steps()
        trio.lowlevel.add_instrument(steps)
        try:
            answers = [await conn.request(MetadataRequest()) for _ in range(3)]
        finally:
            trio.lowlevel.remove_instrument(steps)
        assert [a.cluster_id for a in answers] == ["answer-1", "answer-2", "answer-3"]
        assert not [n for n in steps.names if "_read_responses" in n]
        assert not conn.in_flight and not conn.closed
        await conn.aclose()
        nursery.cancel_scope.cancel()


async def test_a_caller_that_reads_times_out_or_is_cancelled_and_closes_the_connection() -> None:
    peer = Peer()
    async with trio.open_nursery() as nursery:
        port = await start_peer(nursery, peer)
        timing_out = await connect(nursery, port, caller_reads=True, max_in_flight=1)
        cancelled = await connect(nursery, port, caller_reads=True, max_in_flight=1)
        peer.handler = peer.silent
        with pytest.raises(RequestTimedOutError, match=r"no response within 0\.2s"):
            await timing_out.request(MetadataRequest(), timeout=0.2)
        assert timing_out.closed
        # Cancelled while reading: no one would read its answer, and its slot would be held
        # for ever, so the connection closes and the next request fails at once.
        with trio.move_on_after(0.2):
            await cancelled.request(MetadataRequest())
        assert cancelled.closed
        for conn in (timing_out, cancelled):
            with trio.fail_after(5), pytest.raises(NetworkError, match="closed"):
                await conn.request(MetadataRequest())
        nursery.cancel_scope.cancel()


async def test_connecting_to_nothing_is_a_network_error() -> None:
    with trio.socket.socket() as s:
        await s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound but not listening: connection refused
        async with trio.open_nursery() as nursery:
            with pytest.raises(NetworkError, match=f"cannot connect to 127.0.0.1:{port}"):
                await connect(nursery, port)
