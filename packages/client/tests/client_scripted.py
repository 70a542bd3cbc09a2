"""A scripted Kafka cluster for the client's tests: brokers on loopback TCP speaking the real
protocol (gregor-protocol frames), with just enough broker behind them.

It is the other end of the wire, not a mock of the client: partitions hold the record
batches producers sent (base offsets patched as a leader does), fetches return them, a
small group coordinator runs the classic rebalance protocol, and offsets are committed.
Tests inject faults through `hooks` (answer an API differently, once or always, at once or
by returning an awaitable) and move leaders; `requests` records what the client sent. A
producer's transactional requests (InitProducerId, AddPartitionsToTxn, EndTxn) are accepted
as they come, when a test advertises them (TXN_VERSIONS).

It runs its own trio loop in a background thread, so sync clients (their I/O on a thread
of their own) and async tests use it the same way.
"""

from __future__ import annotations

import inspect
import itertools
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import attrs
import trio

from gregor.protocol.apis import api_name
from gregor.protocol.apis.add_partitions_to_txn import (
    AddPartitionsToTxnPartitionResult,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    AddPartitionsToTxnTopicResult,
)
from gregor.protocol.apis.alter_partition_reassignments import (
    AlterPartitionReassignmentsResponse,
    ReassignablePartitionResponse,
    ReassignableTopicResponse,
)
from gregor.protocol.apis.api_versions import ApiVersion, ApiVersionsRequest, ApiVersionsResponse
from gregor.protocol.apis.create_partitions import (
    CreatePartitionsResponse,
    CreatePartitionsTopicResult,
)
from gregor.protocol.apis.create_topics import CreatableTopicResult, CreateTopicsResponse
from gregor.protocol.apis.delete_groups import DeletableGroupResult, DeleteGroupsResponse
from gregor.protocol.apis.delete_records import (
    DeleteRecordsPartitionResult,
    DeleteRecordsResponse,
    DeleteRecordsTopicResult,
)
from gregor.protocol.apis.delete_topics import DeletableTopicResult, DeleteTopicsResponse
from gregor.protocol.apis.describe_configs import (
    DescribeConfigsResourceResult,
    DescribeConfigsResponse,
    DescribeConfigsResult,
)
from gregor.protocol.apis.describe_groups import (
    DescribedGroup,
    DescribedGroupMember,
    DescribeGroupsResponse,
)
from gregor.protocol.apis.elect_leaders import (
    ElectLeadersResponse,
    PartitionResult,
    ReplicaElectionResult,
)
from gregor.protocol.apis.elect_leaders import TopicPartitions as ElectTopicPartitions
from gregor.protocol.apis.end_txn import EndTxnRequest, EndTxnResponse
from gregor.protocol.apis.fetch import (
    AbortedTransaction,
    FetchableTopicResponse,
    FetchRequest,
    FetchResponse,
    PartitionData,
)
from gregor.protocol.apis.find_coordinator import (
    Coordinator,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
)
from gregor.protocol.apis.heartbeat import HeartbeatRequest, HeartbeatResponse
from gregor.protocol.apis.incremental_alter_configs import (
    AlterConfigsResourceResponse as IncrementalAlterConfigsResourceResponse,
)
from gregor.protocol.apis.incremental_alter_configs import IncrementalAlterConfigsResponse
from gregor.protocol.apis.init_producer_id import InitProducerIdRequest, InitProducerIdResponse
from gregor.protocol.apis.join_group import (
    JoinGroupRequest,
    JoinGroupResponse,
    JoinGroupResponseMember,
)
from gregor.protocol.apis.leave_group import LeaveGroupRequest, LeaveGroupResponse, MemberResponse
from gregor.protocol.apis.list_groups import ListedGroup, ListGroupsResponse
from gregor.protocol.apis.list_offsets import (
    ListOffsetsPartitionResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    ListOffsetsTopicResponse,
)
from gregor.protocol.apis.list_partition_reassignments import (
    ListPartitionReassignmentsResponse,
    OngoingPartitionReassignment,
    OngoingTopicReassignment,
)
from gregor.protocol.apis.metadata import (
    MetadataRequest,
    MetadataResponse,
    MetadataResponseBroker,
    MetadataResponsePartition,
    MetadataResponseTopic,
)
from gregor.protocol.apis.offset_commit import (
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetCommitResponsePartition,
    OffsetCommitResponseTopic,
)
from gregor.protocol.apis.offset_fetch import (
    OffsetFetchRequest,
    OffsetFetchResponse,
    OffsetFetchResponsePartition,
    OffsetFetchResponseTopic,
)
from gregor.protocol.apis.produce import (
    PartitionProduceResponse,
    ProduceRequest,
    ProduceResponse,
    TopicProduceResponse,
)
from gregor.protocol.apis.sync_group import SyncGroupRequest, SyncGroupResponse
from gregor.protocol.errors import ErrorCode
from gregor.protocol.framing import FrameReader, decode_request, encode_response
from gregor.protocol.records import (
    BatchBuilder,
    ControlType,
    RecordBatch,
    iter_batches,
    patch_base_offset,
)
from gregor.protocol.schema import Request, Response

# What the scripted brokers advertise (a Kafka 3.x broker's ranges, trimmed to what they do).
DEFAULT_VERSIONS: dict[int, tuple[int, int]] = {
    0: (3, 9),  # Produce
    1: (4, 12),  # Fetch
    2: (1, 7),  # ListOffsets
    3: (0, 12),  # Metadata
    8: (2, 8),  # OffsetCommit
    9: (1, 7),  # OffsetFetch
    10: (0, 4),  # FindCoordinator
    11: (0, 9),  # JoinGroup
    12: (0, 4),  # Heartbeat
    13: (0, 5),  # LeaveGroup
    14: (0, 5),  # SyncGroup
    15: (0, 5),  # DescribeGroups
    16: (0, 4),  # ListGroups
    18: (0, 3),  # ApiVersions
    19: (0, 7),  # CreateTopics
    20: (0, 6),  # DeleteTopics
    21: (0, 2),  # DeleteRecords
    32: (0, 4),  # DescribeConfigs
    37: (0, 3),  # CreatePartitions
    42: (0, 2),  # DeleteGroups
    43: (0, 2),  # ElectLeaders
    44: (0, 1),  # IncrementalAlterConfigs
    45: (0, 0),  # AlterPartitionReassignments
    46: (0, 0),  # ListPartitionReassignments
}

# The transactional producer's APIs, for tests that add them to what the brokers advertise.
TXN_VERSIONS: dict[int, tuple[int, int]] = {
    22: (0, 4),  # InitProducerId
    24: (0, 3),  # AddPartitionsToTxn
    26: (0, 3),  # EndTxn
}

DROP = object()  # a hook's answer: close the connection instead of answering
SILENT = object()  # a hook's answer: never answer

Hook = Callable[[int, Request, int], Any]  # (broker id, request, version) -> answer or None


@attrs.define
class Partition:
    leader: int
    leader_epoch: int = 0
    log_start: int = 0
    next_offset: int = 0
    batches: list[tuple[int, bytes]] = attrs.Factory(list)  # (base offset, batch bytes)
    open_txns: dict[int, int] = attrs.Factory(dict)  # producer id -> first offset
    aborted: list[tuple[int, int, int]] = attrs.Factory(list)  # (producer, first, last)


@attrs.define
class Member:
    member_id: str
    instance_id: str | None
    session_timeout: float
    rebalance_timeout: float
    protocols: list[tuple[str, bytes]]
    last_seen: float = 0.0
    joined: trio.Event | None = None  # set when the join round completes
    join_response: JoinGroupResponse | None = None
    rejoined: bool = False


@attrs.define
class Group:
    group_id: str
    state: str = "Empty"
    generation: int = 0
    protocol: str | None = None
    leader: str = ""
    members: dict[str, Member] = attrs.Factory(dict)
    assignments: dict[str, bytes] = attrs.Factory(dict)
    synced: trio.Event = attrs.Factory(trio.Event)
    pending: set[str] = attrs.Factory(set)
    offsets: dict[tuple[str, int], tuple[int, str | None]] = attrs.Factory(dict)
    generations: list[int] = attrs.Factory(list)


class ScriptedCluster:
    def __init__(
        self,
        brokers: int = 1,
        versions: dict[int, tuple[int, int]] | None = None,
        *,
        auto_create_partitions: int | None = 1,
        rebalance_delay: float = 0.05,
    ) -> None:
        self.broker_ids = list(range(brokers))
        self.versions = dict(DEFAULT_VERSIONS if versions is None else versions)
        self.auto_create_partitions = auto_create_partitions
        self.rebalance_delay = rebalance_delay
        self.ports: dict[int, int] = {}
        self.topics: dict[str, list[Partition]] = {}
        self.groups: dict[str, Group] = {}
        self.coordinator = 0
        self.hooks: dict[int, Hook] = {}
        self.requests: list[tuple[int, str, int, Request]] = []
        self.connections = 0
        self._appended = trio.Event()
        self._member_ids = itertools.count(1)
        self._producer_ids = itertools.count(1000)
        self._token: trio.lowlevel.TrioToken | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._stop: trio.Event | None = None
        self.down: set[int] = set()  # brokers that refuse (close) every connection
        self.controller = 0
        self.configs: dict[tuple[int, str], dict[str, str]] = {}  # (type, name) -> overrides
        self.reassignments: dict[tuple[str, int], list[int]] = {}

    # -- running ---------------------------------------------------------------------------

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{self.ports[b]}" for b in self.broker_ids)

    def start(self) -> ScriptedCluster:
        self._thread = threading.Thread(target=trio.run, args=(self._main,), daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("scripted cluster did not start")
        return self

    def stop(self) -> None:
        if self._token is not None and self._stop is not None:
            try:
                self._token.run_sync_soon(self._stop.set)
            except trio.RunFinishedError:
                pass
        if self._thread is not None:
            self._thread.join(10)

    async def _main(self) -> None:
        self._token = trio.lowlevel.current_trio_token()
        self._stop = trio.Event()
        async with trio.open_nursery() as nursery:
            for broker in self.broker_ids:
                listeners = await nursery.start(
                    trio.serve_tcp, lambda s, b=broker: self._serve(b, s), 0
                )
                self.ports[broker] = listeners[0].socket.getsockname()[1]
            nursery.start_soon(self._expire_sessions)
            self._ready.set()
            await self._stop.wait()
            nursery.cancel_scope.cancel()

    def _in_loop(self) -> bool:
        try:
            return trio.lowlevel.current_trio_token() is self._token
        except RuntimeError:
            return False

    def call(self, fn: Callable[[], Any]) -> Any:
        """Run `fn` on the cluster's loop (for changes that must not race a request)."""
        assert self._token is not None
        token = self._token
        try:
            trio.lowlevel.current_trio_token()
        except RuntimeError:
            return trio.from_thread.run_sync(fn, trio_token=token)
        # From a trio test's own loop: trio lends no thread hop from there, so hop twice.
        result: list[Any] = []
        hop = threading.Thread(
            target=lambda: result.append(trio.from_thread.run_sync(fn, trio_token=token))
        )
        hop.start()
        hop.join(10)
        return result[0]

    # -- state -----------------------------------------------------------------------------

    def create_topic(
        self, name: str, partitions: int = 1, leaders: list[int] | None = None
    ) -> None:
        leaders = leaders or [self.broker_ids[i % len(self.broker_ids)] for i in range(partitions)]
        self.topics[name] = [Partition(leader) for leader in leaders]

    def move_leader(self, topic: str, partition: int, leader: int) -> None:
        p = self.topics[topic][partition]
        p.leader = leader
        p.leader_epoch += 1

    def records(self, topic: str, partition: int) -> list[Any]:
        """Every record in a partition, decoded."""
        out = []
        for _, data in self.topics[topic][partition].batches:
            for batch in iter_batches(data):
                out.extend(batch.records())
        return out

    def batches(self, topic: str, partition: int) -> list[bytes]:
        return [data for _, data in self.topics[topic][partition].batches]

    def append(self, topic: str, partition: int, batch: bytes) -> int:
        """Append a record batch as a leader would; returns its base offset."""
        if not self._in_loop():  # from a test's thread: wake fetches on the loop's side
            result: int = self.call(lambda: self.append(topic, partition, batch))
            return result
        p = self.topics[topic][partition]
        base = p.next_offset
        for entry in iter_batches(batch, strict=True):
            data = bytearray(entry.data)
            patch_base_offset(data, 0, p.next_offset)
            p.batches.append((p.next_offset, bytes(data)))
            header = entry.header
            if header.is_transactional and not header.is_control:
                p.open_txns.setdefault(header.producer_id, p.next_offset)
            elif header.is_control:
                first = p.open_txns.pop(header.producer_id, p.next_offset)
                if RecordBatch.from_bytes(data).control_record().type is ControlType.ABORT:
                    p.aborted.append((header.producer_id, first, p.next_offset))
            p.next_offset += header.last_offset_delta + 1
        self._appended.set()
        self._appended = trio.Event()
        return base

    def sent(self, api: str) -> list[tuple[int, int, Request]]:
        """(broker, version, request) of every request of one API, in order."""
        return [(b, v, r) for b, name, v, r in self.requests if name == api]

    # -- the wire --------------------------------------------------------------------------

    async def _serve(self, broker: int, stream: trio.SocketStream) -> None:
        self.connections += 1
        if broker in self.down:
            await stream.aclose()
            return
        reader = FrameReader(1 << 28)
        send_lock = trio.Lock()
        previous = trio.Event()
        previous.set()
        previous_produce = previous  # Produce requests are handled one at a time, in order
        async with trio.open_nursery() as nursery:
            while True:
                try:
                    data = await stream.receive_some(1 << 16)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    break
                if not data:
                    break
                reader.feed(data)
                while (frame := reader.next_frame()) is not None:
                    header, body = decode_request(frame)
                    version = header.request_api_version
                    self.requests.append((broker, api_name(body.api_key), version, body))
                    done = trio.Event()
                    handled_after = handled = None
                    if isinstance(body, ProduceRequest):
                        handled_after, handled = previous_produce, trio.Event()
                        previous_produce = handled
                    nursery.start_soon(
                        self._answer,
                        broker,
                        stream,
                        send_lock,
                        header,
                        body,
                        previous,
                        done,
                        (handled_after, handled),
                    )
                    previous = done
            nursery.cancel_scope.cancel()

    async def _answer(
        self,
        broker: int,
        stream: trio.SocketStream,
        lock: trio.Lock,
        header: Any,
        body: Request,
        turn: trio.Event,
        done: trio.Event,
        handling: tuple[trio.Event | None, trio.Event | None] = (None, None),
    ) -> None:
        """Work concurrently, answer in request order (as a broker does on a connection);
        `handling`: the events to wait for before handling and to set after (Produce
        requests reach the log in the order they came, as on a broker)."""
        version = header.request_api_version
        handled_after, handled = handling
        try:
            if handled_after is not None and not handled_after.is_set():
                # (no checkpoint otherwise: a connection closed right after an acks=0
                # Produce cancels what has not reached the log yet)
                await handled_after.wait()
            try:
                hook = self.hooks.get(body.api_key)
                answer = hook(broker, body, version) if hook is not None else None
                if inspect.isawaitable(answer):  # a hook that answers later (on the loop)
                    answer = await answer
                if answer is None:
                    answer = await self._handle(broker, body, version)
            finally:
                if handled is not None:
                    handled.set()
            await turn.wait()
            if answer is SILENT:
                await trio.sleep_forever()
            if answer is DROP or broker in self.down:
                await stream.aclose()
                return
            if answer is not None:
                response_version = (
                    0 if isinstance(answer, ApiVersionsResponse) and answer.error_code else version
                )
                async with lock:
                    await stream.send_all(
                        encode_response(answer, response_version, header.correlation_id)
                    )
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        finally:
            done.set()

    async def _handle(self, broker: int, body: Request, version: int) -> Response | None:
        if isinstance(body, ApiVersionsRequest):
            keys = [ApiVersion(k, lo, hi) for k, (lo, hi) in sorted(self.versions.items())]
            if version > self.versions[18][1]:
                return ApiVersionsResponse(error_code=ErrorCode.UNSUPPORTED_VERSION, api_keys=keys)
            return ApiVersionsResponse(api_keys=keys)
        handler = getattr(self, f"_{type(body).__name__}", None)
        if handler is None:
            raise NotImplementedError(type(body).__name__)
        result: Response | None = await handler(broker, body, version)
        return result

    # -- data plane ------------------------------------------------------------------------

    async def _MetadataRequest(self, broker: int, body: MetadataRequest, version: int) -> Response:
        names = (
            list(self.topics)
            if body.topics is None or (version == 0 and not body.topics)
            else [t.name or "" for t in body.topics]
        )
        topics = []
        for name in names:
            if name not in self.topics:
                if body.allow_auto_topic_creation and self.auto_create_partitions:
                    self.create_topic(name, self.auto_create_partitions)
                else:
                    topics.append(
                        MetadataResponseTopic(
                            error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, name=name
                        )
                    )
                    continue
            partitions = [
                MetadataResponsePartition(
                    partition_index=i,
                    leader_id=p.leader,
                    leader_epoch=p.leader_epoch,
                    replica_nodes=[p.leader],
                    isr_nodes=[p.leader],
                )
                for i, p in enumerate(self.topics[name])
            ]
            topics.append(MetadataResponseTopic(name=name, partitions=partitions))
        brokers = [MetadataResponseBroker(b, "127.0.0.1", self.ports[b]) for b in self.broker_ids]
        return MetadataResponse(
            brokers=brokers, cluster_id="scripted", controller_id=self.controller, topics=topics
        )

    async def _ProduceRequest(
        self, broker: int, body: ProduceRequest, version: int
    ) -> Response | None:
        responses = []
        for topic in body.topic_data:
            parts = []
            for p in topic.partition_data:
                partitions = self.topics.get(topic.name)
                if partitions is None or p.index >= len(partitions):
                    code, base = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1
                elif partitions[p.index].leader != broker:
                    code, base = ErrorCode.NOT_LEADER_OR_FOLLOWER, -1
                else:
                    code, base = 0, self.append(topic.name, p.index, bytes(p.records or b""))
                parts.append(PartitionProduceResponse(p.index, code, base))
            responses.append(TopicProduceResponse(topic.name, parts))
        if body.acks == 0:
            return None
        return ProduceResponse(responses=responses)

    def _read(self, topic: str, partition: int, offset: int, max_bytes: int) -> tuple[int, bytes]:
        p = self.topics[topic][partition]
        if offset < p.log_start or offset > p.next_offset:
            return ErrorCode.OFFSET_OUT_OF_RANGE, b""
        out = bytearray()
        for base, data in p.batches:
            last = base + int.from_bytes(data[23:27], "big")
            if last < offset:
                continue
            if out and len(out) + len(data) > max_bytes:
                break
            out += data
        return 0, bytes(out)

    async def _FetchRequest(self, broker: int, body: FetchRequest, version: int) -> Response:
        deadline = trio.current_time() + body.max_wait_ms / 1000
        while True:
            appended = self._appended
            total = 0
            responses = []
            for topic in body.topics:
                parts = []
                for p in topic.partitions:
                    partitions = self.topics.get(topic.topic)
                    data = PartitionData(partition_index=p.partition)
                    if partitions is None or p.partition >= len(partitions):
                        data.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    elif partitions[p.partition].leader != broker:
                        data.error_code = ErrorCode.NOT_LEADER_OR_FOLLOWER
                    else:
                        state = partitions[p.partition]
                        code, records = self._read(
                            topic.topic, p.partition, p.fetch_offset, p.partition_max_bytes
                        )
                        data.error_code = code
                        data.high_watermark = state.next_offset
                        data.last_stable_offset = state.next_offset
                        data.log_start_offset = state.log_start
                        data.records = records
                        if body.isolation_level == 1:
                            data.aborted_transactions = [
                                AbortedTransaction(pid, first)
                                for pid, first, last in state.aborted
                                if last >= p.fetch_offset
                            ]
                        total += len(records)
                    parts.append(data)
                responses.append(FetchableTopicResponse(topic=topic.topic, partitions=parts))
            errors = any(p.error_code for t in responses for p in t.partitions)
            if total >= max(body.min_bytes, 1) or errors or trio.current_time() >= deadline:
                return FetchResponse(responses=responses)
            with trio.move_on_at(deadline):
                await appended.wait()

    async def _ListOffsetsRequest(
        self, broker: int, body: ListOffsetsRequest, version: int
    ) -> Response:
        topics = []
        for topic in body.topics:
            parts = []
            for p in topic.partitions:
                state = self.topics[topic.name][p.partition_index]
                if state.leader != broker:
                    parts.append(
                        ListOffsetsPartitionResponse(
                            p.partition_index, ErrorCode.NOT_LEADER_OR_FOLLOWER
                        )
                    )
                    continue
                if p.timestamp == -1:
                    offset, ts = state.next_offset, -1
                elif p.timestamp == -2:
                    offset, ts = state.log_start, -1
                else:
                    offset, ts = -1, -1
                    for _base, data in state.batches:
                        found = next(
                            (
                                r
                                for b in iter_batches(data)
                                for r in b
                                if r.timestamp >= p.timestamp
                            ),
                            None,
                        )
                        if found is not None:
                            offset, ts = found.offset, found.timestamp
                            break
                parts.append(
                    ListOffsetsPartitionResponse(
                        p.partition_index,
                        0,
                        timestamp=ts,
                        offset=offset,
                        leader_epoch=state.leader_epoch,
                    )
                )
            topics.append(ListOffsetsTopicResponse(topic.name, parts))
        return ListOffsetsResponse(topics=topics)

    # -- groups ----------------------------------------------------------------------------

    async def _FindCoordinatorRequest(
        self, broker: int, body: FindCoordinatorRequest, version: int
    ) -> Response:
        node = self.coordinator
        if version >= 4:
            return FindCoordinatorResponse(
                coordinators=[
                    Coordinator(k, node, "127.0.0.1", self.ports[node])
                    for k in body.coordinator_keys
                ]
            )
        return FindCoordinatorResponse(node_id=node, host="127.0.0.1", port=self.ports[node])

    # -- transactions (every request accepted: the producer's side is what is tested) ------

    async def _InitProducerIdRequest(
        self, broker: int, body: InitProducerIdRequest, version: int
    ) -> Response:
        return InitProducerIdResponse(producer_id=next(self._producer_ids), producer_epoch=0)

    async def _AddPartitionsToTxnRequest(
        self, broker: int, body: AddPartitionsToTxnRequest, version: int
    ) -> Response:
        return AddPartitionsToTxnResponse(
            results_by_topic_v3_and_below=[
                AddPartitionsToTxnTopicResult(
                    t.name, [AddPartitionsToTxnPartitionResult(p) for p in t.partitions]
                )
                for t in body.v3_and_below_topics
            ]
        )

    async def _EndTxnRequest(self, broker: int, body: EndTxnRequest, version: int) -> Response:
        return EndTxnResponse()

    def group(self, group_id: str) -> Group:
        if group_id not in self.groups:
            self.groups[group_id] = Group(group_id)
        return self.groups[group_id]

    def _not_coordinator(self, broker: int) -> bool:
        return broker != self.coordinator

    async def _JoinGroupRequest(
        self, broker: int, body: JoinGroupRequest, version: int
    ) -> Response:
        if self._not_coordinator(broker):
            return JoinGroupResponse(error_code=ErrorCode.NOT_COORDINATOR)
        group = self.group(body.group_id)
        member_id = body.member_id
        static = body.group_instance_id
        protocols = [(p.name, p.metadata) for p in body.protocols]
        if not member_id:
            member_id = f"{static or 'member'}-{next(self._member_ids)}"
            old = next(
                (m for m in group.members.values() if static and m.instance_id == static), None
            )
            if old is not None:
                # A static member restarting: it takes its old place, no rebalance (KIP-345).
                del group.members[old.member_id]
                if group.leader == old.member_id:
                    group.leader = member_id
                if old.member_id in group.assignments:
                    group.assignments[member_id] = group.assignments.pop(old.member_id)
                group.members[member_id] = Member(
                    member_id,
                    static,
                    body.session_timeout_ms / 1000,
                    old.rebalance_timeout,
                    protocols,
                    last_seen=trio.current_time(),
                    rejoined=True,
                )
                if group.state == "Stable":
                    return JoinGroupResponse(
                        generation_id=group.generation,
                        protocol_type="consumer",
                        protocol_name=group.protocol,
                        leader=group.leader,
                        member_id=member_id,
                        skip_assignment=True,  # KIP-814: the leader keeps the assignment
                    )
            elif version >= 4 and static is None:
                group.pending.add(member_id)
                return JoinGroupResponse(
                    error_code=ErrorCode.MEMBER_ID_REQUIRED, member_id=member_id
                )
        elif member_id not in group.members and member_id not in group.pending:
            return JoinGroupResponse(error_code=ErrorCode.UNKNOWN_MEMBER_ID)
        group.pending.discard(member_id)
        rebalance_timeout = (
            body.rebalance_timeout_ms if version >= 1 else body.session_timeout_ms
        ) / 1000
        member = Member(
            member_id,
            static,
            body.session_timeout_ms / 1000,
            rebalance_timeout,
            protocols,
            last_seen=trio.current_time(),
            rejoined=True,
            joined=trio.Event(),
        )
        group.members[member_id] = member
        if group.state != "PreparingRebalance":
            self._prepare_rebalance(group)
        with trio.move_on_after(rebalance_timeout + 5):
            await member.joined.wait()  # type: ignore[union-attr]
        return member.join_response or JoinGroupResponse(error_code=ErrorCode.REBALANCE_IN_PROGRESS)

    def _prepare_rebalance(self, group: Group) -> None:
        """Everyone must rejoin: wait for them (up to the rebalance timeout), then answer."""
        group.state = "PreparingRebalance"
        group.synced.set()  # followers waiting in SyncGroup learn of the rebalance
        group.synced = trio.Event()
        for member in group.members.values():
            member.rejoined = member.joined is not None and not member.joined.is_set()
        trio.lowlevel.spawn_system_task(self._run_rebalance, group)

    async def _run_rebalance(self, group: Group) -> None:
        await trio.sleep(self.rebalance_delay)
        timeout = max([m.rebalance_timeout for m in group.members.values()] or [1.0])
        with trio.move_on_after(timeout):
            while any(not m.rejoined for m in group.members.values()):
                await trio.sleep(0.01)
        for m in [m for m in group.members.values() if not m.rejoined]:
            del group.members[m.member_id]
        members = list(group.members.values())
        if not members:
            group.state = "Empty"
            return
        group.generation += 1
        group.generations.append(group.generation)
        protocols = [name for name, _ in members[0].protocols]
        group.protocol = next(
            (p for p in protocols if all(p in dict(m.protocols) for m in members)), protocols[0]
        )
        if group.leader not in group.members:
            group.leader = members[0].member_id
        group.state = "CompletingRebalance"
        group.assignments = {}
        for m in members:
            m.join_response = JoinGroupResponse(
                generation_id=group.generation,
                protocol_type="consumer",
                protocol_name=group.protocol,
                leader=group.leader,
                member_id=m.member_id,
                members=[
                    JoinGroupResponseMember(
                        o.member_id, o.instance_id, dict(o.protocols)[group.protocol]
                    )
                    for o in members
                ]
                if m.member_id == group.leader
                else [],
            )
            if m.joined is not None:
                m.joined.set()

    async def _SyncGroupRequest(
        self, broker: int, body: SyncGroupRequest, version: int
    ) -> Response:
        group = self.group(body.group_id)
        if body.member_id not in group.members:
            return SyncGroupResponse(error_code=ErrorCode.UNKNOWN_MEMBER_ID)
        if body.generation_id != group.generation:
            return SyncGroupResponse(error_code=ErrorCode.ILLEGAL_GENERATION)
        if group.state == "PreparingRebalance":
            return SyncGroupResponse(error_code=ErrorCode.REBALANCE_IN_PROGRESS)
        if body.member_id == group.leader and group.state == "CompletingRebalance":
            group.assignments = {a.member_id: a.assignment for a in body.assignments}
            group.state = "Stable"
            group.synced.set()
        synced = group.synced
        with trio.move_on_after(30):
            await synced.wait()
        if group.state != "Stable" or body.generation_id != group.generation:
            return SyncGroupResponse(error_code=ErrorCode.REBALANCE_IN_PROGRESS)
        return SyncGroupResponse(
            protocol_type="consumer",
            protocol_name=group.protocol,
            assignment=group.assignments.get(body.member_id, b""),
        )

    async def _HeartbeatRequest(
        self, broker: int, body: HeartbeatRequest, version: int
    ) -> Response:
        group = self.group(body.group_id)
        member = group.members.get(body.member_id)
        if member is None:
            return HeartbeatResponse(error_code=ErrorCode.UNKNOWN_MEMBER_ID)
        member.last_seen = trio.current_time()
        if group.state == "PreparingRebalance":
            return HeartbeatResponse(error_code=ErrorCode.REBALANCE_IN_PROGRESS)
        if body.generation_id != group.generation:
            return HeartbeatResponse(error_code=ErrorCode.ILLEGAL_GENERATION)
        return HeartbeatResponse()

    async def _LeaveGroupRequest(
        self, broker: int, body: LeaveGroupRequest, version: int
    ) -> Response:
        group = self.group(body.group_id)
        ids = [m.member_id for m in body.members] if version >= 3 else [body.member_id]
        results = []
        for member_id in ids:
            if group.members.pop(member_id, None) is None:
                results.append(MemberResponse(member_id, None, ErrorCode.UNKNOWN_MEMBER_ID))
            else:
                results.append(MemberResponse(member_id, None, 0))
        if group.members:
            self._prepare_rebalance(group)
        else:
            group.state = "Empty"
        return LeaveGroupResponse(members=results)

    async def _expire_sessions(self) -> None:
        while True:
            await trio.sleep(0.05)
            now = trio.current_time()
            for group in self.groups.values():
                expired = [
                    m for m in group.members.values() if now - m.last_seen > m.session_timeout
                ]
                if expired:
                    for m in expired:
                        del group.members[m.member_id]
                    if group.members:
                        self._prepare_rebalance(group)
                    else:
                        group.state = "Empty"

    async def _OffsetCommitRequest(
        self, broker: int, body: OffsetCommitRequest, version: int
    ) -> Response:
        group = self.group(body.group_id)
        code = 0
        if body.generation_id_or_member_epoch >= 0:
            if body.member_id not in group.members:
                code = ErrorCode.UNKNOWN_MEMBER_ID
            elif body.generation_id_or_member_epoch != group.generation:
                code = ErrorCode.ILLEGAL_GENERATION
            elif group.state == "PreparingRebalance":
                code = ErrorCode.REBALANCE_IN_PROGRESS
        topics = []
        for topic in body.topics:
            parts = []
            for p in topic.partitions:
                if not code:
                    group.offsets[(topic.name, p.partition_index)] = (
                        p.committed_offset,
                        p.committed_metadata,
                    )
                parts.append(OffsetCommitResponsePartition(p.partition_index, code))
            topics.append(OffsetCommitResponseTopic(topic.name, parts))
        return OffsetCommitResponse(topics=topics)

    async def _OffsetFetchRequest(
        self, broker: int, body: OffsetFetchRequest, version: int
    ) -> Response:
        group = self.group(body.group_id)
        wanted: dict[str, list[int]] = {}
        if body.topics is None:
            for t, p in group.offsets:
                wanted.setdefault(t, []).append(p)
        else:
            wanted = {t.name: t.partition_indexes for t in body.topics}
        topics = []
        for name, partitions in wanted.items():
            parts = []
            for p in partitions:
                offset, metadata = group.offsets.get((name, p), (-1, ""))
                parts.append(OffsetFetchResponsePartition(p, offset, -1, metadata, 0))
            topics.append(OffsetFetchResponseTopic(name, parts))
        return OffsetFetchResponse(topics=topics)

    # -- admin -----------------------------------------------------------------------------

    async def _CreateTopicsRequest(self, broker: int, body: Any, version: int) -> Response:
        results = []
        for t in body.topics:
            if broker != self.controller:
                code, message = ErrorCode.NOT_CONTROLLER, None
            elif t.name in self.topics:
                code, message = ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{t.name}' already exists."
            elif t.num_partitions == 0:
                code, message = (
                    ErrorCode.INVALID_PARTITIONS,
                    "Number of partitions must be larger than 0.",
                )
            else:
                code, message = 0, None
                if not body.validate_only:
                    count = len(t.assignments) or (t.num_partitions if t.num_partitions > 0 else 1)
                    leaders = [a.broker_ids[0] for a in t.assignments] or None
                    self.create_topic(t.name, count, leaders)
                    self.configs[(2, t.name)] = {c.name: c.value or "" for c in t.configs}
            results.append(
                CreatableTopicResult(name=t.name, error_code=code, error_message=message)
            )
        return CreateTopicsResponse(topics=results)

    async def _DeleteTopicsRequest(self, broker: int, body: Any, version: int) -> Response:
        results = []
        # v6 names topics in `topics` (each by name or id); v0-5 in `topic_names`.
        names = [t.name for t in body.topics] if version >= 6 else body.topic_names
        for name in names:
            if broker != self.controller:
                code = ErrorCode.NOT_CONTROLLER
            elif self.topics.pop(name, None) is None:
                code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            else:
                code = 0
            results.append(DeletableTopicResult(name=name, error_code=code))
        return DeleteTopicsResponse(responses=results)

    async def _CreatePartitionsRequest(self, broker: int, body: Any, version: int) -> Response:
        results = []
        for t in body.topics:
            partitions = self.topics.get(t.name)
            if partitions is None:
                code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif t.count <= len(partitions):
                code = ErrorCode.INVALID_PARTITIONS
            else:
                code = 0
                if not body.validate_only:
                    partitions.extend(Partition(0) for _ in range(t.count - len(partitions)))
            results.append(CreatePartitionsTopicResult(t.name, code, None))
        return CreatePartitionsResponse(results=results)

    async def _DeleteRecordsRequest(self, broker: int, body: Any, version: int) -> Response:
        topics = []
        for t in body.topics:
            parts = []
            for p in t.partitions:
                state = self.topics[t.name][p.partition_index]
                offset = state.next_offset if p.offset == -1 else p.offset
                if offset > state.next_offset:
                    parts.append(
                        DeleteRecordsPartitionResult(
                            p.partition_index, -1, ErrorCode.OFFSET_OUT_OF_RANGE
                        )
                    )
                    continue
                state.log_start = max(state.log_start, offset)
                parts.append(DeleteRecordsPartitionResult(p.partition_index, state.log_start, 0))
            topics.append(DeleteRecordsTopicResult(t.name, parts))
        return DeleteRecordsResponse(topics=topics)

    async def _DescribeConfigsRequest(self, broker: int, body: Any, version: int) -> Response:
        results = []
        for r in body.resources:
            if r.resource_type == 2 and r.resource_name not in self.topics:
                results.append(
                    DescribeConfigsResult(
                        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None, r.resource_type, r.resource_name
                    )
                )
                continue
            overrides = self.configs.get((r.resource_type, r.resource_name), {})
            entries = [
                DescribeConfigsResourceResult(name=k, value=v, config_source=1)
                for k, v in overrides.items()
            ]
            if "cleanup.policy" not in overrides and r.resource_type == 2:
                entries.append(
                    DescribeConfigsResourceResult(
                        name="cleanup.policy", value="delete", config_source=5
                    )
                )
            results.append(
                DescribeConfigsResult(0, None, r.resource_type, r.resource_name, entries)
            )
        return DescribeConfigsResponse(results=results)

    async def _IncrementalAlterConfigsRequest(
        self, broker: int, body: Any, version: int
    ) -> Response:
        responses = []
        for r in body.resources:
            overrides = self.configs.setdefault((r.resource_type, r.resource_name), {})
            for c in r.configs:
                if c.config_operation == 1:
                    overrides.pop(c.name, None)
                else:
                    overrides[c.name] = c.value or ""
            responses.append(
                IncrementalAlterConfigsResourceResponse(0, None, r.resource_type, r.resource_name)
            )
        return IncrementalAlterConfigsResponse(responses=responses)

    async def _ListGroupsRequest(self, broker: int, body: Any, version: int) -> Response:
        groups = (
            []
            if broker != self.coordinator
            else [ListedGroup(g.group_id, "consumer", g.state) for g in self.groups.values()]
        )
        return ListGroupsResponse(groups=groups)

    async def _DescribeGroupsRequest(self, broker: int, body: Any, version: int) -> Response:
        out = []
        for group_id in body.groups:
            group = self.groups.get(group_id)
            if group is None:
                out.append(DescribedGroup(group_id=group_id, group_state="Dead"))
                continue
            out.append(
                DescribedGroup(
                    group_id=group_id,
                    group_state=group.state,
                    protocol_type="consumer",
                    protocol_data=group.protocol or "",
                    members=[
                        DescribedGroupMember(
                            m.member_id,
                            m.instance_id,
                            "client",
                            "/127.0.0.1",
                            b"",
                            group.assignments.get(m.member_id, b""),
                        )
                        for m in group.members.values()
                    ],
                )
            )
        return DescribeGroupsResponse(groups=out)

    async def _DeleteGroupsRequest(self, broker: int, body: Any, version: int) -> Response:
        results = []
        for group_id in body.groups_names:
            group = self.groups.get(group_id)
            if group is None:
                code = ErrorCode.GROUP_ID_NOT_FOUND
            elif group.members:
                code = ErrorCode.NON_EMPTY_GROUP
            else:
                code = 0
                del self.groups[group_id]
            results.append(DeletableGroupResult(group_id, code))
        return DeleteGroupsResponse(results=results)

    async def _ElectLeadersRequest(self, broker: int, body: Any, version: int) -> Response:
        wanted = body.topic_partitions or [
            ElectTopicPartitions(t, list(range(len(ps)))) for t, ps in self.topics.items()
        ]
        return ElectLeadersResponse(
            replica_election_results=[
                ReplicaElectionResult(
                    t.topic,
                    [
                        PartitionResult(
                            p, ErrorCode.ELECTION_NOT_NEEDED, "Leader is already preferred"
                        )
                        for p in t.partitions
                    ],
                )
                for t in wanted
            ]
        )

    async def _AlterPartitionReassignmentsRequest(
        self, broker: int, body: Any, version: int
    ) -> Response:
        for t in body.topics:
            for p in t.partitions:
                if p.replicas is None:
                    self.reassignments.pop((t.name, p.partition_index), None)
                else:
                    self.reassignments[(t.name, p.partition_index)] = list(p.replicas)
        return AlterPartitionReassignmentsResponse(
            responses=[
                ReassignableTopicResponse(
                    t.name,
                    [
                        ReassignablePartitionResponse(p.partition_index, 0, None)
                        for p in t.partitions
                    ],
                )
                for t in body.topics
            ]
        )

    async def _ListPartitionReassignmentsRequest(
        self, broker: int, body: Any, version: int
    ) -> Response:
        by_topic: dict[str, list[OngoingPartitionReassignment]] = {}
        for (topic, partition), replicas in sorted(self.reassignments.items()):
            by_topic.setdefault(topic, []).append(
                OngoingPartitionReassignment(partition, replicas, replicas, [])
            )
        return ListPartitionReassignmentsResponse(
            topics=[OngoingTopicReassignment(t, ps) for t, ps in by_topic.items()]
        )


@contextmanager
def scripted_cluster(brokers: int = 1, **kwargs: Any) -> Iterator[ScriptedCluster]:
    cluster = ScriptedCluster(brokers, **kwargs).start()
    try:
        yield cluster
    finally:
        cluster.stop()


def fill(
    cluster: ScriptedCluster,
    topic: str,
    partition: int,
    count: int,
    start: int = 0,
    per_batch: int = 10,
    timestamp: int = 1_700_000_000_000,
) -> None:
    """Append `count` records (value b"<n>") in batches of `per_batch`."""
    for first in range(start, start + count, per_batch):
        builder = BatchBuilder()
        for n in range(first, min(first + per_batch, start + count)):
            builder.append(
                b"%d" % n, key=b"k%d" % n, headers=[("n", b"%d" % n)], timestamp=timestamp + n
            )
        cluster.append(topic, partition, builder.build())


def wait_for(predicate: Callable[[], bool], timeout: float = 10.0, what: str = "condition") -> None:
    """Poll a condition from a test thread (sync clients have no loop to await on)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.01)
