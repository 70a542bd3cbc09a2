"""OffsetCommit, OffsetFetch and OffsetDelete: the rules of who may commit what, when.

- A commit with a generation (or a member id, or an instance id) comes from a member: it must
  be a current member of the current generation, and not while the group completes a
  rebalance (REBALANCE_IN_PROGRESS). A commit without (generation -1) is allowed only while
  the group has no members: an admin tool, or a consumer using Kafka only to store offsets;
  such a commit creates the group.
- A commit is answered once its records are replicated; offsets still being written are
  never returned by a fetch (with `require_stable`, the fetch says UNSTABLE_OFFSET_COMMIT).
- TxnOffsetCommit writes offsets in a producer's transaction: pending (and so
  UNSTABLE_OFFSET_COMMIT to a fetch with `require_stable`) until the transaction's marker.
- Offsets can be deleted of an Empty group, and of a consumer group for topics none of its
  members subscribes to (GROUP_SUBSCRIBED_TO_TOPIC otherwise).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence

from gregor.broker.coordinator.group.checks import consumer_member_error, member_error
from gregor.broker.coordinator.group.group import GroupMetadata, TopicPartition
from gregor.broker.coordinator.group.manager import GroupMetadataManager
from gregor.broker.coordinator.group.member import MemberMetadata
from gregor.broker.coordinator.group.offsets import FetchedOffset, OffsetAndMetadata
from gregor.broker.coordinator.group.results import UNKNOWN_MEMBER_ID, Reply
from gregor.broker.coordinator.group.state import GroupState
from gregor.protocol.apis import ApiKey
from gregor.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

Offsets = Mapping[TopicPartition, OffsetAndMetadata]
# A commit proves the member alive: its session timer starts again (the rebalancer's).
Heartbeat = Callable[[GroupMetadata, MemberMetadata, int], None]


class OffsetCommits:
    def __init__(self, manager: GroupMetadataManager, schedule_heartbeat: Heartbeat) -> None:
        self.manager = manager
        self.schedule_heartbeat = schedule_heartbeat

    def commit(
        self,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        generation_id: int,
        offsets: Offsets,
        reply: Reply[dict[TopicPartition, int]],
    ) -> None:
        error = self.manager.group_status(group_id, ApiKey.OFFSET_COMMIT)
        if error is not None:
            reply.set(dict.fromkeys(offsets, error))
            return
        group = self.manager.get_group(group_id)
        if group is None:
            if generation_id >= 0:
                # A commit of a generation of a group that is gone.
                reply.set(dict.fromkeys(offsets, ErrorCode.ILLEGAL_GENERATION))
                return
            # Not using group management: the group exists for its offsets.
            log.info("group %s: created by a commit of offsets", group_id)
            group = self.manager.add_group(
                GroupMetadata(group_id, GroupState.EMPTY, self.manager.now_ms())
            )
        error = self._validate(group, generation_id, member_id, group_instance_id)
        if error is not None:
            reply.set(dict.fromkeys(offsets, error))
            return
        state = group.state
        if state is GroupState.EMPTY:
            self.manager.store_offsets(group, offsets, reply.set)
        elif state in (GroupState.STABLE, GroupState.PREPARING_REBALANCE):
            # A commit during the rebalance is allowed; the heartbeat tells of the rebalance.
            member = group.get(member_id)
            self.schedule_heartbeat(group, member, member.session_timeout_ms)
            self.manager.store_offsets(group, offsets, reply.set)
        elif state is GroupState.COMPLETING_REBALANCE:
            reply.set(dict.fromkeys(offsets, ErrorCode.REBALANCE_IN_PROGRESS))
        else:
            raise RuntimeError(f"offset commit reached group {group_id} in {state}")

    def txn_commit(
        self,
        group_id: str,
        producer_id: int,
        producer_epoch: int,
        member_id: str,
        group_instance_id: str | None,
        generation_id: int,
        offsets: Offsets,
        reply: Reply[dict[TopicPartition, int]],
    ) -> None:
        """TxnOffsetCommit: the offsets join the producer's transaction (pending until its
        marker). Any group may take them; a member's commit (v3+, KIP-447) must be of a
        current member of the current generation."""
        error = self.manager.group_status(group_id, ApiKey.TXN_OFFSET_COMMIT)
        if error is not None:
            reply.set(dict.fromkeys(offsets, error))
            return
        group = self.manager.get_group(group_id)
        if group is None:
            group = self.manager.add_group(
                GroupMetadata(group_id, GroupState.EMPTY, self.manager.now_ms())
            )
        if group.is_(GroupState.DEAD):
            error = ErrorCode.COORDINATOR_NOT_AVAILABLE
        elif group.consumer is not None:
            if member_id != UNKNOWN_MEMBER_ID or generation_id >= 0:
                error = consumer_member_error(group, member_id, generation_id)
            if error == ErrorCode.STALE_MEMBER_EPOCH:
                error = ErrorCode.ILLEGAL_GENERATION  # Kafka's answer in a transaction
            generation_id = -1  # checked against the member's epoch
        elif member_id != UNKNOWN_MEMBER_ID or group_instance_id is not None:
            error = member_error(group, member_id, group_instance_id, "txn-offset-commit")
        if error is None and generation_id >= 0 and generation_id != group.generation_id:
            error = ErrorCode.ILLEGAL_GENERATION
        if error is not None:
            reply.set(dict.fromkeys(offsets, error))
            return
        self.manager.store_txn_offsets(group, producer_id, producer_epoch, offsets, reply.set)

    def _validate(
        self,
        group: GroupMetadata,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
    ) -> int | None:
        if group.is_(GroupState.DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if group.consumer is not None:
            return consumer_member_error(group, member_id, generation_id)
        if generation_id < 0 and group.is_(GroupState.EMPTY):
            return None  # an admin client or a consumer without group management
        if generation_id >= 0 or member_id != UNKNOWN_MEMBER_ID or group_instance_id is not None:
            error = member_error(group, member_id, group_instance_id, "offset-commit")
            if error is not None:
                return error
            if generation_id != group.generation_id:
                return ErrorCode.ILLEGAL_GENERATION
            return None
        if not group.is_(GroupState.EMPTY):
            return ErrorCode.UNKNOWN_MEMBER_ID  # only members commit for a live group
        return None

    def fetch(
        self,
        group_id: str,
        require_stable: bool,
        partitions: Iterable[TopicPartition] | None = None,
        member: tuple[str, int] | None = None,
    ) -> tuple[int, dict[TopicPartition, FetchedOffset]]:
        """`member`: (member id, epoch) of a consumer-protocol member asking (OffsetFetch
        v9+), which must be current."""
        error = self.manager.group_status(group_id, ApiKey.OFFSET_FETCH)
        if error is not None:
            return error, {}
        group = self.manager.get_group(group_id)
        if member is not None and group is not None and group.consumer is not None:
            error = consumer_member_error(group, *member)
            if error is not None:
                log.info(
                    "group %s: OffsetFetch from member %s at epoch %d refused: %s",
                    group_id,
                    member[0],
                    member[1],
                    ErrorCode(error).name,
                )
                return error, {}
        # Whatever the group's state: a group may use Kafka only to store offsets.
        return ErrorCode.NONE, self.manager.get_offsets(group_id, require_stable, partitions)

    def delete(
        self, group_id: str, partitions: Sequence[TopicPartition]
    ) -> tuple[int, dict[TopicPartition, int]]:
        error = self.manager.group_status(group_id, ApiKey.OFFSET_DELETE)
        if error is not None:
            return error, {}
        group = self.manager.get_group(group_id)
        if group is None or group.is_(GroupState.DEAD):
            return self.manager.missing_group(group_id), {}
        results: dict[TopicPartition, int] = {}
        eligible: list[TopicPartition] = []
        if group.is_(GroupState.EMPTY):
            eligible = list(partitions)
        elif group.is_consumer_group:
            for tp in partitions:
                if group.is_subscribed_to_topic(tp[0]):
                    results[tp] = ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
                else:
                    eligible.append(tp)
        else:
            return ErrorCode.NON_EMPTY_GROUP, {}
        if eligible:
            removed = self.manager.cleanup_group_metadata(
                [group], lambda g: g.remove_offsets(eligible)
            )
            results.update(dict.fromkeys(eligible, ErrorCode.NONE))
            log.info("group %s: deleted offsets of %s (%d removed)", group_id, eligible, removed)
        return ErrorCode.NONE, results
