"""Group membership (the classic rebalance protocol) and committed offsets.

The wire side of a consumer group, on the I/O loop:
- `join_group`: FindCoordinator, JoinGroup (asking again with the member id the coordinator
  hands out, KIP-394), the leader's assignment over the members' subscriptions, SyncGroup.
  Retriable answers (a rebalance starting over, a coordinator moving or loading) are
  retried; a stale generation or an unknown member id is dropped and the member rejoins.
- `run_heartbeats`: Heartbeat every heartbeat.interval.ms while the member is stable. The
  answers say when to rejoin (REBALANCE_IN_PROGRESS) or that the membership is lost
  (UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION). It also enforces max.poll.interval.ms: a member
  whose application stopped polling leaves the group (a static member just stops
  heartbeating, as Kafka's does), and rejoins on its next poll.
- `commit` and `committed`: OffsetCommit and OffsetFetch at the coordinator.

When to rebalance and what the application is told (on_assign, on_revoke, on_lost) is the
consumer's business, in the application's thread: this class only reports `rejoin_needed`
and `lost`.
"""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence

import trio

from gregor.client.assignors import Assignor, MemberSubscription, RebalanceProtocol
from gregor.client.assignors.sticky import group_by_topic
from gregor.client.config import ConsumerConfig
from gregor.client.coordinator_lookup import CoordinatorType, find_coordinator
from gregor.client.network import NetworkClient
from gregor.client.types import OffsetAndMetadata, TopicPartition, partitions_by_topic
from gregor.protocol.apis.heartbeat import HeartbeatRequest, HeartbeatResponse
from gregor.protocol.apis.join_group import (
    JoinGroupRequest,
    JoinGroupRequestProtocol,
    JoinGroupResponse,
)
from gregor.protocol.apis.leave_group import LeaveGroupRequest, LeaveGroupResponse, MemberIdentity
from gregor.protocol.apis.offset_commit import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
    OffsetCommitResponse,
)
from gregor.protocol.apis.offset_fetch import (
    OffsetFetchRequest,
    OffsetFetchRequestTopic,
    OffsetFetchResponse,
)
from gregor.protocol.apis.sync_group import (
    SyncGroupRequest,
    SyncGroupRequestAssignment,
    SyncGroupResponse,
)
from gregor.protocol.consumer_protocol import (
    PROTOCOL_TYPE,
    ConsumerProtocolAssignment,
    ConsumerProtocolSubscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from gregor.protocol.errors import (
    DecodeError,
    ErrorCode,
    KafkaError,
    NetworkError,
    RequestTimedOutError,
)
from gregor.protocol.schema import Request, Response

log = logging.getLogger(__name__)

NO_GENERATION = -1

# Answers after which the member rejoins from scratch (its id or generation is void).
_MEMBER_LOST = {ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION}
_COORDINATOR_GONE = {ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE}


class MemberState(enum.Enum):
    UNJOINED = "unjoined"
    REBALANCING = "rebalancing"
    STABLE = "stable"


class ConsumerCoordinator:
    def __init__(
        self,
        config: ConsumerConfig,
        client: NetworkClient,
        assignors: Sequence[Assignor],
    ) -> None:
        assert config.group_id is not None
        self.config = config
        self.client = client
        self.group_id = config.group_id
        self.instance_id = config.group_instance_id
        self.assignors = list(assignors)
        self.protocol = (
            RebalanceProtocol.COOPERATIVE
            if all(RebalanceProtocol.COOPERATIVE in a.protocols for a in self.assignors)
            else RebalanceProtocol.EAGER
        )
        self.session_timeout = config.session_timeout_ms / 1000
        self.rebalance_timeout = config.max_poll_interval_ms / 1000
        self.heartbeat_interval = config.heartbeat_interval_ms / 1000
        self.member_id = ""
        self.generation = NO_GENERATION
        self.protocol_name: str | None = None
        self.leader_id = ""
        self.state = MemberState.UNJOINED
        self.rejoin_needed = True
        self.rejoin_reason = "joining the group"
        self.lost = False  # the membership ended without the partitions being revoked
        self.fatal: KafkaError | None = None
        self.owned: list[TopicPartition] = []
        self.last_poll = time.monotonic()
        self.partition_counts: dict[str, int] = {}  # what the leader assigned over
        self._coordinator: int | None = None
        self._join_lock = trio.Lock()
        self._heartbeat_now = trio.Event()

    @property
    def generation_info(self) -> tuple[int, str]:
        """(generation, member id) to send with commits: valid only while stable."""
        if self.state is MemberState.STABLE:
            return self.generation, self.member_id
        return NO_GENERATION, ""

    def request_rejoin(self, reason: str) -> None:
        if not self.rejoin_needed:
            log.info("group %s: rejoining (%s)", self.group_id, reason)
        self.rejoin_needed = True
        self.rejoin_reason = reason

    def _reset_generation(self, reason: str, *, forget_member: bool) -> None:
        log.info("group %s: membership lost (%s)", self.group_id, reason)
        self.generation = NO_GENERATION
        if forget_member:
            self.member_id = ""
        self.state = MemberState.UNJOINED
        self.lost = True
        self.request_rejoin(reason)

    # -- the coordinator -------------------------------------------------------------------

    async def coordinator(self) -> int:
        if self._coordinator is None:
            self._coordinator = await find_coordinator(
                self.client, self.group_id, CoordinatorType.GROUP, self.rebalance_timeout
            )
        return self._coordinator

    def coordinator_gone(self) -> None:
        if self._coordinator is not None:
            self.client.disconnect(self._coordinator, "the group coordinator moved")
        self._coordinator = None

    async def _request(
        self,
        body: Request | Callable[[int], Request],
        timeout: float | None = None,
        api: type[Request] | None = None,
    ) -> Response:
        """Send to the coordinator: a request, or `body(version)` of type `api` where its
        fields differ between versions."""
        node = await self.coordinator()
        try:
            if isinstance(body, Request):
                return await self.client.request(node, body, timeout=timeout)
            assert api is not None
            return await self.client.request_built(node, api, body, timeout=timeout)
        except NetworkError:
            self.coordinator_gone()
            raise

    def _check_fatal(self, code: int, what: str) -> None:
        if code == ErrorCode.FENCED_INSTANCE_ID:
            self.fatal = KafkaError.for_code(code)(
                f"group {self.group_id!r}: another consumer uses group.instance.id "
                f"{self.instance_id!r} ({what})"
            )
            raise self.fatal

    # -- joining ---------------------------------------------------------------------------

    async def join_group(self, topics: Sequence[str]) -> list[TopicPartition]:
        """Join (or rejoin) and sync; the partitions this member is given."""
        async with self._join_lock:
            if self.fatal is not None:
                raise self.fatal
            attempts = 0
            while True:
                try:
                    assigned = await self._join_once(topics)
                except (NetworkError, RequestTimedOutError) as exc:
                    log.debug("group %s: join attempt failed: %s", self.group_id, exc)
                    self.coordinator_gone()
                except _Retry as retry:
                    if retry.backoff:
                        await trio.sleep(self.client.retry_backoff.delay(attempts))
                        attempts += 1
                    continue
                else:
                    return assigned
                await trio.sleep(self.client.retry_backoff.delay(attempts))
                attempts += 1

    def _subscription(self, assignor: Assignor, topics: Sequence[str]) -> bytes:
        owned = self.owned if self.protocol is RebalanceProtocol.COOPERATIVE else []
        subscription = ConsumerProtocolSubscription(
            topics=sorted(topics),
            user_data=assignor.subscription_user_data(topics),
            owned_partitions=group_by_topic(owned),
            generation_id=self.generation,
            rack_id=self.config.client_rack or None,
        )
        return encode_subscription(subscription)

    async def _join_once(self, topics: Sequence[str]) -> list[TopicPartition]:
        self.state = MemberState.REBALANCING
        request = JoinGroupRequest(
            group_id=self.group_id,
            session_timeout_ms=self.config.session_timeout_ms,
            rebalance_timeout_ms=self.config.max_poll_interval_ms,
            member_id=self.member_id,
            group_instance_id=self.instance_id,
            protocol_type=PROTOCOL_TYPE,
            protocols=[
                JoinGroupRequestProtocol(a.name, self._subscription(a, topics))
                for a in self.assignors
            ],
            reason=self.rejoin_reason,
        )
        response = await self._request(request, timeout=self.rebalance_timeout + 5)
        assert isinstance(response, JoinGroupResponse)
        code = response.error_code
        if code == ErrorCode.MEMBER_ID_REQUIRED:
            self.member_id = response.member_id
            raise _Retry(backoff=False)
        self._retry_on(code, "JoinGroup")
        self.member_id = response.member_id
        self.generation = response.generation_id
        self.protocol_name = response.protocol_name
        self.leader_id = response.leader
        if response.leader == response.member_id and not response.skip_assignment:
            assignments = await self._assign(response)
        else:
            assignments = []
        sync = await self._request(
            SyncGroupRequest(
                group_id=self.group_id,
                generation_id=self.generation,
                member_id=self.member_id,
                group_instance_id=self.instance_id,
                protocol_type=PROTOCOL_TYPE,
                protocol_name=self.protocol_name,
                assignments=assignments,
            ),
            timeout=self.rebalance_timeout + 5,
        )
        assert isinstance(sync, SyncGroupResponse)
        self._retry_on(sync.error_code, "SyncGroup")
        try:
            _, assignment = decode_assignment(sync.assignment)
        except DecodeError as exc:
            raise KafkaError(f"group {self.group_id!r}: unreadable assignment: {exc}") from exc
        assigned = [
            TopicPartition(t.topic, p) for t in assignment.assigned_partitions for p in t.partitions
        ]
        assignor = self._assignor(self.protocol_name)
        assignor.on_assignment(assigned, self.generation)
        self.state = MemberState.STABLE
        self.rejoin_needed = False
        self.lost = False
        self.owned = list(assigned)
        self._heartbeat_now.set()
        log.info(
            "group %s: generation %d, member %s, %d partition(s)",
            self.group_id,
            self.generation,
            self.member_id,
            len(assigned),
        )
        return assigned

    def _retry_on(self, code: int, what: str) -> None:
        """Raise _Retry for answers after which joining starts over; KafkaError for fatal."""
        if code == ErrorCode.NONE:
            return
        self._check_fatal(code, what)
        error = KafkaError.for_code(code)
        if code == ErrorCode.UNKNOWN_MEMBER_ID:
            self.member_id = ""
            self.generation = NO_GENERATION
            raise _Retry(backoff=False)
        if code == ErrorCode.ILLEGAL_GENERATION:
            self.generation = NO_GENERATION
            raise _Retry(backoff=False)
        if code in _COORDINATOR_GONE:
            self.coordinator_gone()
            raise _Retry(backoff=True)
        if code in (ErrorCode.REBALANCE_IN_PROGRESS, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS):
            raise _Retry(backoff=code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
        self.fatal = error(f"group {self.group_id!r}: {what} failed: {error.error_name()}")
        raise self.fatal

    def _assignor(self, name: str | None) -> Assignor:
        for assignor in self.assignors:
            if assignor.name == name:
                return assignor
        raise KafkaError(
            f"group {self.group_id!r}: the coordinator chose unknown protocol {name!r}"
        )

    async def _assign(self, response: JoinGroupResponse) -> list[SyncGroupRequestAssignment]:
        """As the leader: run the chosen assignor over every member's subscription."""
        members: dict[str, MemberSubscription] = {}
        versions: dict[str, int] = {}
        for member in response.members:
            try:
                version, sub = decode_subscription(member.metadata)
            except DecodeError as exc:
                raise KafkaError(
                    f"group {self.group_id!r}: member {member.member_id} sent an unreadable "
                    f"subscription: {exc}"
                ) from exc
            versions[member.member_id] = version
            members[member.member_id] = MemberSubscription(
                member_id=member.member_id,
                topics=tuple(sub.topics),
                owned_partitions=tuple(
                    TopicPartition(t.topic, p) for t in sub.owned_partitions for p in t.partitions
                ),
                generation_id=sub.generation_id,
                user_data=sub.user_data,
                rack_id=sub.rack_id or None,
                group_instance_id=member.group_instance_id,
            )
        wanted = sorted({t for m in members.values() for t in m.topics})
        self.client.add_topics(wanted)
        cluster = await self.client.update_metadata()
        layout = {t: cluster.replica_racks(t) for t in wanted if cluster.partition_count(t)}
        self.partition_counts = {t: len(racks) for t, racks in layout.items()}
        result = self._assignor(response.protocol_name).assign(layout, members)
        return [
            SyncGroupRequestAssignment(
                member_id,
                encode_assignment(
                    ConsumerProtocolAssignment(group_by_topic(partitions)),
                    min(versions.get(member_id, 0), 3),
                ),
            )
            for member_id, partitions in result.items()
        ]

    # -- staying in the group --------------------------------------------------------------

    async def run_heartbeats(self) -> None:
        """Heartbeat while stable; leave when the application stops polling."""
        last_success = time.monotonic()
        while True:
            with trio.move_on_after(self.heartbeat_interval):
                await self._heartbeat_now.wait()
            self._heartbeat_now = trio.Event()
            if self.state is not MemberState.STABLE or self.fatal is not None:
                last_success = time.monotonic()
                continue
            now = time.monotonic()
            if now - self.last_poll > self.config.max_poll_interval_ms / 1000:
                await self._poll_timeout()
                continue
            try:
                alive = await self._heartbeat_once()
            except (NetworkError, RequestTimedOutError, KafkaError) as exc:
                log.debug("group %s: heartbeat failed: %s", self.group_id, exc)
                if time.monotonic() - last_success > self.session_timeout:
                    self.coordinator_gone()
                continue
            if alive:
                last_success = time.monotonic()

    async def _heartbeat_once(self) -> bool:
        """One Heartbeat; whether the coordinator still knows the member."""
        response = await self._request(
            HeartbeatRequest(self.group_id, self.generation, self.member_id, self.instance_id),
            timeout=min(self.session_timeout, self.config.request_timeout_ms / 1000),
        )
        assert isinstance(response, HeartbeatResponse)
        self._heartbeat_answer(response.error_code)
        return response.error_code in (ErrorCode.NONE, ErrorCode.REBALANCE_IN_PROGRESS)

    def _heartbeat_answer(self, code: int) -> None:
        if code == ErrorCode.NONE or self.state is not MemberState.STABLE:
            return
        if code == ErrorCode.REBALANCE_IN_PROGRESS:
            self.request_rejoin("the group is rebalancing")
        elif code in _MEMBER_LOST:
            self._reset_generation(
                KafkaError.for_code(code).error_name(),
                forget_member=code == ErrorCode.UNKNOWN_MEMBER_ID,
            )
        elif code in _COORDINATOR_GONE:
            self.coordinator_gone()
        elif code == ErrorCode.FENCED_INSTANCE_ID:
            try:
                self._check_fatal(code, "Heartbeat")
            except KafkaError:
                pass
        else:
            log.warning("group %s: heartbeat answered %s", self.group_id, code)

    async def _poll_timeout(self) -> None:
        log.warning(
            "group %s: no poll() within max.poll.interval.ms (%d ms); leaving the group so "
            "its partitions can be reassigned",
            self.group_id,
            self.config.max_poll_interval_ms,
        )
        if self.instance_id is None:
            await self.leave("the consumer stopped polling")
        self._reset_generation("poll timeout", forget_member=self.instance_id is None)

    async def leave(self, reason: str) -> None:
        """LeaveGroup (dynamic members only: a static member keeps its place until its
        session times out, so a restart does not cause a rebalance)."""
        if self.instance_id is not None or not self.member_id:
            return
        group, member = self.group_id, self.member_id

        def request(version: int) -> LeaveGroupRequest:
            if version < 3:  # one member by id; v3+ a list of members (KIP-345)
                return LeaveGroupRequest(group_id=group, member_id=member)
            return LeaveGroupRequest(group_id=group, members=[MemberIdentity(member, None, reason)])

        try:
            with trio.move_on_after(self.config.request_timeout_ms / 1000):
                response = await self._request(request, api=LeaveGroupRequest)
                assert isinstance(response, LeaveGroupResponse)
        except (NetworkError, KafkaError) as exc:
            log.debug("group %s: leaving failed: %s", self.group_id, exc)
        self.member_id = ""
        self.generation = NO_GENERATION
        self.state = MemberState.UNJOINED

    # -- offsets ---------------------------------------------------------------------------

    async def commit(
        self, offsets: Mapping[TopicPartition, OffsetAndMetadata], timeout: float
    ) -> None:
        """Commit offsets; retriable errors are retried until `timeout`."""
        if not offsets:
            return
        attempts = 0
        last: Exception | None = None
        with trio.move_on_after(timeout):
            while True:
                try:
                    await self._commit_once(offsets)
                    return
                except _Retry:
                    pass
                except (NetworkError, RequestTimedOutError) as exc:
                    last = exc
                await trio.sleep(self.client.retry_backoff.delay(attempts))
                attempts += 1
        raise RequestTimedOutError(
            f"group {self.group_id!r}: offsets not committed within {timeout:.1f}s"
            + (f": {last}" if last else "")
        )

    async def _commit_once(self, offsets: Mapping[TopicPartition, OffsetAndMetadata]) -> None:
        generation, member_id = self.generation_info
        response = await self._request(
            OffsetCommitRequest(
                group_id=self.group_id,
                generation_id_or_member_epoch=generation,
                member_id=member_id,
                group_instance_id=self.instance_id,
                topics=commit_topics(offsets),
            )
        )
        assert isinstance(response, OffsetCommitResponse)
        for topic in response.topics:
            for p in topic.partitions:
                self._commit_answer(p.error_code, TopicPartition(topic.name, p.partition_index))

    def _commit_answer(self, code: int, tp: TopicPartition) -> None:
        if code == ErrorCode.NONE:
            return
        self._check_fatal(code, "OffsetCommit")
        error = KafkaError.for_code(code)
        if code in _COORDINATOR_GONE:
            self.coordinator_gone()
            raise _Retry(backoff=True)
        if code == ErrorCode.STALE_MEMBER_EPOCH:
            # KIP-848: the coordinator moved the member to a new epoch meanwhile; the next
            # heartbeat brings it, and the commit is sent again with it.
            self._heartbeat_now.set()
            raise _Retry(backoff=True)
        if code in (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.REQUEST_TIMED_OUT):
            raise _Retry(backoff=True)
        if code in _MEMBER_LOST or code == ErrorCode.REBALANCE_IN_PROGRESS:
            if code in _MEMBER_LOST:
                self._reset_generation(
                    error.error_name(), forget_member=code == ErrorCode.UNKNOWN_MEMBER_ID
                )
            else:
                self.request_rejoin("a commit found the group rebalancing")
            raise error(
                f"commit of {tp} failed: group {self.group_id!r} rebalanced and the partition "
                f"may belong to another member now ({error.error_name()}); poll() to rejoin"
            )
        raise error(f"commit of {tp} for group {self.group_id!r}: {error.error_name()}")

    async def committed(
        self, partitions: Sequence[TopicPartition], timeout: float
    ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        """The group's committed offsets (None: nothing committed)."""
        found = await fetch_committed(
            self.client, self.group_id, partitions, timeout, self.coordinator, self.coordinator_gone
        )
        return {tp: found.get(tp) for tp in partitions}


def commit_topics(
    offsets: Mapping[TopicPartition, OffsetAndMetadata],
) -> list[OffsetCommitRequestTopic]:
    """OffsetCommit's topics field for these offsets."""
    by_topic: dict[str, list[OffsetCommitRequestPartition]] = {}
    for tp, meta in sorted(offsets.items()):
        by_topic.setdefault(tp.topic, []).append(
            OffsetCommitRequestPartition(
                partition_index=tp.partition,
                committed_offset=meta.offset,
                committed_leader_epoch=-1 if meta.leader_epoch is None else meta.leader_epoch,
                committed_metadata=meta.metadata,
            )
        )
    return [OffsetCommitRequestTopic(t, ps) for t, ps in by_topic.items()]


async def fetch_committed(
    client: NetworkClient,
    group_id: str,
    partitions: Sequence[TopicPartition] | None,
    timeout: float,
    locate: Callable[[], Awaitable[int]],
    lost: Callable[[], None],
) -> dict[TopicPartition, OffsetAndMetadata]:
    """OffsetFetch: a group's committed offsets (of these partitions, or all of them);
    partitions without a commit are left out. `locate` finds the coordinator, `lost`
    forgets it; coordinator moves and loads are retried until `timeout`."""
    topics = None
    if partitions is not None:
        topics = [
            OffsetFetchRequestTopic(t, ps) for t, ps in partitions_by_topic(partitions).items()
        ]
    attempts = 0
    with trio.move_on_after(timeout):
        while True:
            try:
                connection = await client.connect(await locate())
                version = connection.version_for(OffsetFetchRequest, max_version=7, min_version=1)
                if topics is None and version < 2:
                    version = connection.version_for(
                        OffsetFetchRequest, max_version=7, min_version=2
                    )
                # Offsets of pending transactions wait (v7+); before that the Java consumer
                # does without, as here.
                request = OffsetFetchRequest(
                    group_id=group_id, topics=topics, require_stable=version >= 7
                )
                response = await client.send(connection, request, version)
                assert isinstance(response, OffsetFetchResponse)
                return _committed_answer(group_id, response, lost)
            except _Retry:
                pass
            except (NetworkError, RequestTimedOutError):
                lost()
            await trio.sleep(client.retry_backoff.delay(attempts))
            attempts += 1
    raise RequestTimedOutError(
        f"group {group_id!r}: committed offsets not fetched within {timeout:.1f}s"
    )


def _committed_answer(
    group_id: str, response: OffsetFetchResponse, lost: Callable[[], None]
) -> dict[TopicPartition, OffsetAndMetadata]:
    codes = [response.error_code] + [p.error_code for t in response.topics for p in t.partitions]
    for code in codes:
        if code in _COORDINATOR_GONE:
            lost()
            raise _Retry(backoff=True)
        if code in (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.UNSTABLE_OFFSET_COMMIT):
            raise _Retry(backoff=True)
        if code:
            error = KafkaError.for_code(code)
            raise error(f"fetching committed offsets of group {group_id!r}: {error.error_name()}")
    out: dict[TopicPartition, OffsetAndMetadata] = {}
    for topic in response.topics:
        for p in topic.partitions:
            if p.committed_offset >= 0:
                epoch = p.committed_leader_epoch if p.committed_leader_epoch >= 0 else None
                out[TopicPartition(topic.name, p.partition_index)] = OffsetAndMetadata(
                    p.committed_offset, p.metadata or "", epoch
                )
    return out


class _Retry(Exception):
    """Start the current operation over (after a backoff, when asked)."""

    def __init__(self, backoff: bool) -> None:
        super().__init__()
        self.backoff = backoff
