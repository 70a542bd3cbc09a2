"""Committed offsets as the coordinator keeps them."""

from __future__ import annotations

import attrs

INVALID_OFFSET = -1
NO_METADATA = ""


@attrs.frozen(slots=True)
class OffsetAndMetadata:
    offset: int
    leader_epoch: int | None = None
    metadata: str = NO_METADATA
    commit_timestamp_ms: int = 0
    # Only commits of OffsetCommit v1-v4 with their own retention have one (value v1).
    expire_timestamp_ms: int | None = None


@attrs.frozen(slots=True)
class CommittedOffset:
    """An offset and where its record is in `__consumer_offsets`: of two commits of the same
    partition, the one written later wins, whatever order they were confirmed in."""

    record_offset: int
    value: OffsetAndMetadata

    def older_than(self, other: CommittedOffset) -> bool:
        return self.record_offset < other.record_offset


@attrs.frozen(slots=True)
class FetchedOffset:
    """One partition of an OffsetFetch answer."""

    offset: int = INVALID_OFFSET
    leader_epoch: int | None = None
    metadata: str = NO_METADATA
    error: int = 0
