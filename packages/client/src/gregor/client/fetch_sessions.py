"""A fetcher's side of incremental fetch sessions (KIP-227), Kafka's FetchSessionHandler.

One handler per broker fetched from. `build` turns the partitions to fetch now into what
the next Fetch request sends: all of them in a full request (session epoch 0, which asks
the broker for a session, or -1 before Fetch v7), else only those added or changed since
the last request (a new fetch offset, leader epoch, ...) and the ones to forget. The
response moves the session on (`handle_response`); a session error, or a lost connection
(`handle_error`), makes the next request a full one, so the fetcher never needs to know.
Partitions left out of an incremental response had nothing new: no records, the same high
watermark, last stable offset and log start offset as the last response said.
"""

from __future__ import annotations

import logging

import attrs

from gregor.protocol.apis.fetch import FetchPartition, FetchResponse, FetchTopic, ForgottenTopic
from gregor.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

Key = tuple[str, int]

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
INT32_MAX = 2**31 - 1


@attrs.frozen
class FetchSessionRequest:
    """The session's part of one Fetch request."""

    session_id: int
    session_epoch: int
    topics: list[FetchTopic]
    forgotten: list[ForgottenTopic]

    @property
    def full(self) -> bool:
        return self.session_epoch in (INITIAL_EPOCH, FINAL_EPOCH)


def _by_topic(partitions: dict[Key, FetchPartition]) -> list[FetchTopic]:
    topics: dict[str, list[FetchPartition]] = {}
    for (topic, _), partition in partitions.items():
        topics.setdefault(topic, []).append(partition)
    return [FetchTopic(topic=t, partitions=ps) for t, ps in topics.items()]


class FetchSessionHandler:
    def __init__(self, name: str = "") -> None:
        self.name = name  # for the log: who fetches from whom
        self.session_id = INVALID_SESSION_ID
        self.epoch = INITIAL_EPOCH
        self.partitions: dict[Key, FetchPartition] = {}  # as the session has them

    def __repr__(self) -> str:
        return f"<FetchSessionHandler {self.name} session {self.session_id} epoch {self.epoch}>"

    def build(
        self, wanted: dict[Key, FetchPartition], sessions: bool = True
    ) -> FetchSessionRequest:
        """The next request for `wanted` (their request data, by topic and partition).
        `sessions` False (Fetch v0-6): a full request that asks for no session."""
        if not sessions:
            self.session_id, self.epoch = INVALID_SESSION_ID, INITIAL_EPOCH
            self.partitions = dict(wanted)
            return FetchSessionRequest(INVALID_SESSION_ID, FINAL_EPOCH, _by_topic(wanted), [])
        if self.epoch == INITIAL_EPOCH:
            self.partitions = dict(wanted)
            return FetchSessionRequest(self.session_id, INITIAL_EPOCH, _by_topic(wanted), [])
        previous = self.partitions
        changed = {
            k: p for k, p in wanted.items() if (old := previous.get(k)) is not p and old != p
        }
        forgotten: dict[str, list[int]] = {}
        for topic, index in previous.keys() - wanted.keys():
            forgotten.setdefault(topic, []).append(index)
        self.partitions = dict(wanted)
        return FetchSessionRequest(
            self.session_id,
            self.epoch,
            _by_topic(changed),
            [ForgottenTopic(topic=t, partitions=sorted(ps)) for t, ps in forgotten.items()],
        )

    def build_changed(self, changed: dict[Key, FetchPartition]) -> FetchSessionRequest | None:
        """The next incremental request when the partitions to fetch are the last request's,
        of which only `changed` may have changed: it costs what changed, not the session's
        size. None when the next request must be a full one, or `changed` names a partition
        the session lacks: then `build` it."""
        if self.epoch == INITIAL_EPOCH:
            return None
        previous = self.partitions
        moved: dict[Key, FetchPartition] = {}
        for key, partition in changed.items():
            old = previous.get(key)
            if old is None:
                return None
            if old is not partition and old != partition:
                moved[key] = partition
        previous.update(moved)
        return FetchSessionRequest(self.session_id, self.epoch, _by_topic(moved), [])

    def handle_response(self, sent: FetchSessionRequest, response: FetchResponse) -> bool:
        """Move the session on; False if the response is an error for the whole request
        (nothing was read; after a session error the next request is a full one)."""
        error = response.error_code
        if error != ErrorCode.NONE:
            if error == ErrorCode.FETCH_SESSION_ID_NOT_FOUND:
                self.session_id, self.epoch = INVALID_SESSION_ID, INITIAL_EPOCH
            else:
                self.epoch = INITIAL_EPOCH  # close the session and open a new one
            log.info("%r: fetch error %d; the next fetch is a full one", self, error)
            return False
        if sent.session_epoch == FINAL_EPOCH:
            return True
        if response.session_id == INVALID_SESSION_ID:
            # None created (the broker's cache is full), or the broker closed ours.
            self.session_id, self.epoch = INVALID_SESSION_ID, INITIAL_EPOCH
        elif sent.full:
            self.session_id, self.epoch = response.session_id, 1
        else:
            self.epoch = 1 if self.epoch == INT32_MAX else self.epoch + 1
        return True

    def handle_error(self) -> None:
        """The request failed (a lost connection): the next one is full, closing the
        session it may have left on the broker."""
        self.epoch = INITIAL_EPOCH


SESSION_ERRORS = frozenset(
    {
        ErrorCode.FETCH_SESSION_ID_NOT_FOUND,
        ErrorCode.INVALID_FETCH_SESSION_EPOCH,
        ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR,
    }
)
