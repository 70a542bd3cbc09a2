"""Incremental fetch sessions (KIP-227): the broker's side, Kafka's FetchSession/FetchManager.

A fetcher (a follower's replica fetcher, a consumer) that sends Fetch v7+ with session id 0
and epoch 0 asks for a session: the full request's partitions are cached under a new
session id, returned in the response. Its next requests are *incremental* (that id, epoch
1, 2, ...): they name only the partitions whose fetch position changed, and
`forgotten_topics_data` the ones to drop; the cached partitions are read as if asked again.
An incremental response leaves out every partition with nothing new for the fetcher: no
records, the same high watermark, last stable offset and log start offset as it was last
told, no error. So a follower of 100 partitions of which one is written sends and receives
one partition per round, not 100.

The broker's side costs what moved too. Each session keeps a standing watch in the fetch
purgatory on its partitions (`Subscription`): the partitions notified since its last fetch
(appends, high watermark and leadership changes), and those its last fetch did not find
quiet, are the only ones the next fetch tests, and it parks on the watch. Once a second a
fetch looks at all of them, which also catches what does not notify (a log start moved by
retention, a log gone offline).

A full request (epoch 0 or -1) closes the session it names; epoch -1 asks for no new one.
An incremental request for an unknown session gets FETCH_SESSION_ID_NOT_FOUND, one with the
wrong epoch INVALID_FETCH_SESSION_EPOCH, one whose use of topic ids (Fetch v13+) differs from
the session's FETCH_SESSION_TOPIC_ID_ERROR; the fetcher then starts over with a full request.

The cache holds `max.incremental.fetch.session.cache.slots` sessions (0: sessions declined).
When it is full, a new session may evict (Kafka's rules): a session unused for two minutes;
else, for a follower's (privileged) session, the smallest consumer session or any older
than two minutes; for a consumer's, the smallest session older than two minutes. Either
only if the new session is worth more: a follower's beats a consumer's, then more
partitions beat fewer.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Collection, Iterable, Sequence

from gregor.broker.partition import Partition
from gregor.broker.purgatory import Purgatory, Subscription
from gregor.broker.replica_manager import FetchParams, FetchPartition
from gregor.protocol.apis.fetch import PartitionData
from gregor.protocol.errors import ErrorCode
from gregor.storage.results import FetchIsolation

Key = tuple[str, int]

INVALID_SESSION_ID = 0  # no session
INITIAL_EPOCH = 0  # a full request that creates a session
FINAL_EPOCH = -1  # a full request that creates none
EVICTION_MS = 120_000  # Kafka's min.incremental.fetch.session.eviction.ms (not configurable)
# A follower's fetch skips its quiet partitions, so the leader does not see it caught up
# on them; every REFRESH_MS one fetch reads them all (at most replica.lag.time.max.ms / 4).
# A consumer's tests them all then.
REFRESH_MS = 1_000
INT32_MAX = 2**31 - 1


def next_epoch(epoch: int) -> int:
    if epoch < 0:
        return epoch  # FINAL_EPOCH stays
    return 1 if epoch == INT32_MAX else epoch + 1


def _now_ms() -> int:
    return int(time.monotonic() * 1000)


class CachedPartition:
    """A partition of a session: what the fetcher last asked (its fetch position) and what
    it was last told (high watermark, last stable offset, log start offset)."""

    __slots__ = ("high_watermark", "last_stable_offset", "log_start_offset", "request")

    def __init__(self, request: FetchPartition) -> None:
        self.request = request
        # -1: never told, so the first response includes the partition.
        self.high_watermark = -1
        self.last_stable_offset = -1
        self.log_start_offset = -1

    def must_respond(self, data: PartitionData) -> bool:
        """Whether an incremental response includes the partition; remembers what it says."""
        respond = bool(data.records) or data.error_code != ErrorCode.NONE
        respond = respond or data.diverging_epoch.epoch >= 0 or data.preferred_read_replica >= 0
        if (
            self.high_watermark != data.high_watermark
            or self.last_stable_offset != data.last_stable_offset
            or self.log_start_offset != data.log_start_offset
        ):
            respond = True
            self.last_stable_offset = data.last_stable_offset
            self.log_start_offset = data.log_start_offset
            self.high_watermark = data.high_watermark
        if data.error_code != ErrorCode.NONE:
            self.high_watermark = -1  # sent again once the error is gone
        return respond


class FetchSession:
    __slots__ = (
        "creation_ms",
        "epoch",
        "id",
        "last_used_ms",
        "partitions",
        "privileged",
        "refreshed_ms",
        "uses_topic_ids",
        "watch",
    )

    def __init__(
        self,
        session_id: int,
        privileged: bool,
        uses_topic_ids: bool,
        now: int,
        epoch: int,
        watch: Subscription[Key] | None = None,
    ) -> None:
        self.id = session_id
        self.privileged = privileged  # a follower's
        self.uses_topic_ids = uses_topic_ids
        self.creation_ms = now
        self.last_used_ms = now
        self.refreshed_ms = now  # when every partition was last looked at (a follower's: read)
        self.epoch = epoch  # the epoch the next incremental request must carry
        self.partitions: dict[Key, CachedPartition] = {}
        # In the fetch purgatory, on every partition: those to look at in the next fetch.
        self.watch = watch

    def __repr__(self) -> str:
        return (
            f"<FetchSession {self.id} epoch {self.epoch} privileged={self.privileged} "
            f"{len(self.partitions)} partitions>"
        )

    def update(self, wanted: Iterable[FetchPartition], forgotten: Sequence[Key]) -> None:
        asked = []
        for request in wanted:
            key = (request.topic, request.partition)
            asked.append(key)
            cached = self.partitions.get(key)
            if cached is None:
                self.partitions[key] = CachedPartition(request)
            else:
                cached.request = request
        for key in forgotten:
            self.partitions.pop(key, None)
        watch = self.watch
        if watch is not None:
            if forgotten:
                watch.unwatch(forgotten)
            if asked:
                watch.watch(asked)  # new ones
                watch.changed.update(asked)  # a new position: looked at now

    def looked_at(self, entries: Entries) -> None:
        """The partitions a fetch read were not quiet: its next fetch looks at them again."""
        if self.watch is not None:
            self.watch.changed.update((r.topic, r.partition) for r, _ in entries)

    def close(self) -> None:
        if self.watch is not None:
            self.watch.close()

    def requests(self) -> list[FetchPartition]:
        return [cached.request for cached in self.partitions.values()]


Entries = list[tuple[FetchPartition, PartitionData]]


class FetchContext:
    """How one Fetch request is read and answered. `partitions` are read (but those
    `quiet` says have nothing new); `finish` takes their response data and says (error
    code, session id, the partitions to send)."""

    __slots__ = ("partitions",)

    def __init__(self, partitions: list[FetchPartition]) -> None:
        self.partitions = partitions

    @property
    def watch(self) -> Subscription[Key] | None:
        """The session's watch, when this fetch looks at its changed partitions only."""
        return None

    @property
    def quiet(self) -> Callable[[FetchParams, FetchPartition, Partition | None], bool] | None:
        return None

    def finish(self, entries: Entries, always: Collection[Key] = ()) -> tuple[int, int, Entries]:
        """`always`: partitions sent even when unchanged (a follower's replication-throttled
        ones, whose records were held back: it waits a little before asking again)."""
        return ErrorCode.NONE, INVALID_SESSION_ID, entries  # sessionless: everything


class SessionErrorContext(FetchContext):
    __slots__ = ("error",)

    def __init__(self, error: int) -> None:
        super().__init__([])
        self.error = error

    def finish(self, entries: Entries, always: Collection[Key] = ()) -> tuple[int, int, Entries]:
        return self.error, INVALID_SESSION_ID, []


class FullFetchContext(FetchContext):
    """A full request asking for a session: created when the response is made, if the
    cache has or can make room."""

    __slots__ = ("cache", "privileged", "uses_topic_ids")

    def __init__(
        self,
        cache: FetchSessionCache,
        partitions: list[FetchPartition],
        privileged: bool,
        uses_topic_ids: bool,
    ) -> None:
        super().__init__(partitions)
        self.cache = cache
        self.privileged = privileged
        self.uses_topic_ids = uses_topic_ids

    def finish(self, entries: Entries, always: Collection[Key] = ()) -> tuple[int, int, Entries]:
        session = self.cache.maybe_create(self.privileged, self.uses_topic_ids, len(entries))
        if session is None:
            return ErrorCode.NONE, INVALID_SESSION_ID, entries
        for request, data in entries:
            cached = CachedPartition(request)
            cached.must_respond(data)
            session.partitions[(request.topic, request.partition)] = cached
        if session.watch is not None:
            session.watch.watch(session.partitions)
            session.watch.changed.update(session.partitions)  # the first look is at all
        self.cache.touch(session)
        return ErrorCode.NONE, session.id, entries


class IncrementalFetchContext(FetchContext):
    __slots__ = ("expected_epoch", "refresh", "session")

    def __init__(self, session: FetchSession, refresh: bool = False) -> None:
        super().__init__(session.requests())
        self.session = session
        self.expected_epoch = session.epoch
        self.refresh = refresh  # looks at every partition
        if refresh and session.watch is not None:
            session.watch.take()

    @property
    def watch(self) -> Subscription[Key] | None:
        return None if self.refresh else self.session.watch

    @property
    def quiet(self) -> Callable[[FetchParams, FetchPartition, Partition | None], bool] | None:
        # A follower's refresh reads every partition: the leader records it caught up on
        # the quiet ones too, which keeps it in their ISR once a write comes.
        return None if self.refresh and self.session.privileged else self._quiet

    def _quiet(
        self, params: FetchParams, request: FetchPartition, partition: Partition | None
    ) -> bool:
        """Nothing new for the fetcher: it asked for the partition's end (the log end for a
        follower, which the leader has recorded, else the HW or LSO) in the leader epoch it
        knows, and was last told the HW, LSO and log start there are now. Such a partition,
        most of a follower's in a steady state, is then neither read nor answered: a round
        costs what moved. The cheapest tests go first: this runs for every partition of
        the session on each fetch."""
        if partition is None:
            return False
        local = partition.log
        if local is None or local.offline:
            return False
        offset = request.fetch_offset
        if params.replica_id >= 0:  # a follower
            if offset != local.log_end_offset or partition.leader_id != partition.local_id:
                return False
            # And the leader knows where the follower is: a position it reports for the
            # first time (its fetch after an append) moves the high watermark.
            follower = partition.followers.get(params.replica_id)
            if (
                follower is None
                or follower.log_end_offset != offset
                or follower.log_start_offset != request.log_start_offset
            ):
                return False
        else:
            if params.isolation is FetchIsolation.TXN_COMMITTED:
                if offset != local.last_stable_offset:
                    return False
            elif offset != local.high_watermark:
                return False
            if params.client_rack is None and not partition.is_leader:
                return False
        if 0 <= request.current_leader_epoch != partition.leader_epoch:
            return False
        cached = self.session.partitions.get((request.topic, request.partition))
        return (
            cached is not None
            and cached.high_watermark == local.high_watermark
            and cached.last_stable_offset == local.last_stable_offset
            and cached.log_start_offset == local.log_start_offset
        )

    def finish(self, entries: Entries, always: Collection[Key] = ()) -> tuple[int, int, Entries]:
        session = self.session
        session.looked_at(entries)
        if session.epoch != self.expected_epoch:
            # Another request of the session came while this one waited (a duplicate).
            return ErrorCode.INVALID_FETCH_SESSION_EPOCH, session.id, []
        partitions = session.partitions
        kept: Entries = []
        for request, data in entries:
            key = (request.topic, request.partition)
            cached = partitions.get(key)
            if cached is None or not (cached.must_respond(data) or key in always):
                continue
            kept.append((request, data))
            if data.records:
                # Partitions that returned data go last, so that under the response's byte
                # limit the others get their turn next time (Kafka's rotation).
                partitions[key] = partitions.pop(key)
        return ErrorCode.NONE, session.id, kept


class FetchSessionCache:
    """The sessions of one broker, at most `max_entries` of them."""

    def __init__(
        self,
        max_entries: int,
        eviction_ms: int = EVICTION_MS,
        clock: Callable[[], int] = _now_ms,
        refresh_ms: int = REFRESH_MS,
        purgatory: Purgatory[Key] | None = None,
    ) -> None:
        self.max_entries = max_entries
        # Where the sessions keep their watches (none: every fetch tests every partition).
        self.purgatory = purgatory
        self.eviction_ms = eviction_ms
        self.clock = clock
        # How often an incremental fetch looks at every partition (a follower's reads them).
        self.refresh_ms = refresh_ms
        self.sessions: dict[int, FetchSession] = {}
        self.evictions = 0

    def __len__(self) -> int:
        return len(self.sessions)

    @property
    def total_partitions(self) -> int:
        return sum(len(s.partitions) for s in self.sessions.values())

    def new_context(
        self,
        version: int,
        session_id: int,
        epoch: int,
        wanted: list[FetchPartition],
        forgotten: Sequence[Key],
        from_follower: bool,
    ) -> FetchContext:
        """Kafka's FetchManager.newContext, for Fetch `version`."""
        if version < 7:
            return FetchContext(wanted)  # before KIP-227: no sessions
        uses_topic_ids = version >= 13
        if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            if session_id != INVALID_SESSION_ID:
                self._remove(session_id)  # a full request closes its session
            if epoch == FINAL_EPOCH or self.max_entries <= 0:
                return FetchContext(wanted)
            return FullFetchContext(self, wanted, from_follower, uses_topic_ids)
        session = self.sessions.get(session_id)
        if session is None:
            return SessionErrorContext(ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
        if session.epoch != epoch:
            return SessionErrorContext(ErrorCode.INVALID_FETCH_SESSION_EPOCH)
        if session.uses_topic_ids != uses_topic_ids:
            return SessionErrorContext(ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR)
        session.update(wanted, forgotten)
        if not session.partitions:
            self._remove(session.id)  # nothing left to fetch: the session ends
            return FetchContext(wanted)
        now = self.touch(session)
        session.epoch = next_epoch(session.epoch)
        refresh = now - session.refreshed_ms >= self.refresh_ms
        if refresh:
            session.refreshed_ms = now
        return IncrementalFetchContext(session, refresh)

    def _remove(self, session_id: int) -> None:
        session = self.sessions.pop(session_id, None)
        if session is not None:
            session.close()

    def touch(self, session: FetchSession) -> int:
        session.last_used_ms = now = self.clock()
        return now

    def maybe_create(
        self, privileged: bool, uses_topic_ids: bool, size: int
    ) -> FetchSession | None:
        now = self.clock()
        if len(self.sessions) >= self.max_entries and not self._try_evict(privileged, size, now):
            return None
        session_id = INVALID_SESSION_ID
        while session_id == INVALID_SESSION_ID or session_id in self.sessions:
            session_id = random.randint(1, INT32_MAX - 1)
        watch = self.purgatory.subscribe() if self.purgatory is not None else None
        session = FetchSession(
            session_id, privileged, uses_topic_ids, now, next_epoch(INITIAL_EPOCH), watch
        )
        self.sessions[session_id] = session
        return session

    def _try_evict(self, privileged: bool, size: int, now: int) -> bool:
        """Kafka's FetchSessionCache.tryEvict: the least recently used session if it is
        stale, else the least valuable evictable one if it is worth less than the new one.
        Sessions are compared by (privileged, size, id)."""
        if not self.sessions:
            return False
        oldest = min(self.sessions.values(), key=lambda s: (s.last_used_ms, s.id))
        if now - oldest.last_used_ms > self.eviction_ms:
            victim: FetchSession | None = oldest
        else:
            # A session younger than eviction_ms is safe from consumers, and a follower's
            # only from followers.
            evictable = [
                s
                for s in self.sessions.values()
                if now - s.creation_ms > self.eviction_ms or (privileged and not s.privileged)
            ]
            victim = min(
                evictable, key=lambda s: (s.privileged, len(s.partitions), s.id), default=None
            )
            if victim is not None and (privileged, size) <= (
                victim.privileged,
                len(victim.partitions),
            ):
                victim = None  # not worth more than the one it would evict
        if victim is None:
            return False
        self._remove(victim.id)
        self.evictions += 1
        return True
