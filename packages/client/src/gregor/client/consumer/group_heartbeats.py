"""Group membership with the KIP-848 consumer protocol (`group.protocol=consumer`).

The coordinator assigns; the member only heartbeats (ConsumerGroupHeartbeat) and follows:
- joining is a heartbeat with epoch 0 and the subscription; the answer gives the member
  its epoch and its assignment (topic ids, resolved to names through metadata). The member
  id is the member's own (KIP-1082): made when first needed and kept through fencing and
  rejoining, as Kafka's consumer does (v1 of the request refuses an empty one);
- a heartbeat answer with a new assignment makes the consumer "rejoin": the consumer core
  runs the same incremental steps as for a cooperative classic group (on_revoke for what
  was taken away, on_assign for what is new), and the next heartbeat lists what the member
  owns now, which tells the coordinator the revocation is done;
- UNKNOWN_MEMBER_ID and FENCED_MEMBER_EPOCH end the membership (partitions lost, on_lost):
  the member joins again with epoch 0; leaving is a heartbeat with epoch -1.

Commits carry the member epoch where the classic protocol has the generation. Committed
offsets and the rest are `ConsumerCoordinator`'s.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence

import trio

from gregor.client.assignors import RebalanceProtocol
from gregor.client.config import ConsumerConfig
from gregor.client.consumer.group_membership import (
    NO_GENERATION,
    ConsumerCoordinator,
    MemberState,
    _Retry,
)
from gregor.client.network import NetworkClient
from gregor.client.types import TopicPartition
from gregor.protocol.apis.consumer_group_heartbeat import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
    TopicPartitions,
    new_member_id,
)
from gregor.protocol.errors import ErrorCode, KafkaError, NetworkError

log = logging.getLogger(__name__)

JOIN_EPOCH = 0
LEAVE_EPOCH = -1
_FENCED = {ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.FENCED_MEMBER_EPOCH}
_COORDINATOR_GONE = {ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE}


class ConsumerGroupMember(ConsumerCoordinator):
    def __init__(self, config: ConsumerConfig, client: NetworkClient) -> None:
        super().__init__(config, client, [])
        self.protocol = RebalanceProtocol.COOPERATIVE  # the consumer core's incremental steps
        self.server_assignor = config.group_remote_assignor
        self._sent: tuple[str, ...] | None = None  # the subscription the coordinator knows
        self._pending: list[TopicPartition] | None = None  # an assignment not yet taken

    @property
    def generation_info(self) -> tuple[int, str]:
        if self.member_id and self.generation > 0:
            return self.generation, self.member_id
        return NO_GENERATION, ""

    def _request_for(
        self, topics: Sequence[str] | None, owned: bool
    ) -> ConsumerGroupHeartbeatRequest:
        joining = self.generation <= 0
        if not self.member_id:
            self.member_id = new_member_id()
        subscription = tuple(sorted(topics)) if topics is not None else None
        changed = joining or (subscription is not None and subscription != self._sent)
        return ConsumerGroupHeartbeatRequest(
            group_id=self.group_id,
            member_id=self.member_id,
            member_epoch=JOIN_EPOCH if joining else self.generation,
            instance_id=self.instance_id,
            rack_id=(self.config.client_rack or None) if joining else None,
            rebalance_timeout_ms=self.config.max_poll_interval_ms if joining else -1,
            subscribed_topic_names=list(subscription or ()) if changed else None,
            server_assignor=self.server_assignor if joining else None,
            topic_partitions=[] if joining else (self._owned_ids() if owned else None),
        )

    def _owned_ids(self) -> list[TopicPartitions]:
        topics = self.client.cluster.topics
        by_topic: dict[uuid.UUID, list[int]] = {}
        for tp in self.owned:
            info = topics.get(tp.topic)
            if info is not None:
                by_topic.setdefault(info.topic_id, []).append(tp.partition)
        return [TopicPartitions(t, sorted(ps)) for t, ps in sorted(by_topic.items())]

    async def _beat(
        self, topics: Sequence[str] | None, owned: bool
    ) -> ConsumerGroupHeartbeatResponse:
        request = self._request_for(topics, owned)
        response = await self._request(
            request, timeout=min(self.session_timeout, self.config.request_timeout_ms / 1000)
        )
        assert isinstance(response, ConsumerGroupHeartbeatResponse)
        code = response.error_code
        if code == ErrorCode.NONE:
            if request.subscribed_topic_names is not None:
                self._sent = tuple(request.subscribed_topic_names)
            if response.member_id:
                self.member_id = response.member_id
            self.generation = response.member_epoch
            if response.heartbeat_interval_ms > 0:
                self.heartbeat_interval = response.heartbeat_interval_ms / 1000
            if response.assignment is not None:
                self._pending = await self._resolve(response.assignment.topic_partitions)
            return response
        if code in _FENCED:
            self._reset_generation(KafkaError.for_code(code).error_name(), forget_member=False)
            self.generation = NO_GENERATION
            self._sent = None
            raise _Retry(backoff=False)
        if code in _COORDINATOR_GONE:
            self.coordinator_gone()
            raise _Retry(backoff=True)
        if code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
            raise _Retry(backoff=True)
        error = KafkaError.for_code(code)
        self.fatal = error(
            f"group {self.group_id!r}: ConsumerGroupHeartbeat failed: {error.error_name()}"
            + (f" ({response.error_message})" if response.error_message else "")
        )
        raise self.fatal

    async def _resolve(self, assigned: Sequence[TopicPartitions]) -> list[TopicPartition]:
        """Topic ids to names, asking for metadata once if one is unknown."""
        names = self.client.cluster.topic_names_by_id
        if any(t.topic_id not in names for t in assigned):
            names = (await self.client.update_metadata()).topic_names_by_id
        out: list[TopicPartition] = []
        for t in assigned:
            name = names.get(t.topic_id)
            if name is None:
                log.warning("group %s: assigned unknown topic id %s", self.group_id, t.topic_id)
                continue
            out.extend(TopicPartition(name, p) for p in t.partitions)
        return sorted(out)

    # -- what the consumer core calls ------------------------------------------------------

    async def _join_once(self, topics: Sequence[str]) -> list[TopicPartition]:
        if self.generation <= 0:
            self.state = MemberState.REBALANCING
        self.client.add_topics(topics)
        await self._beat(topics, owned=True)
        if self._pending is None and self.state is not MemberState.STABLE:
            raise _Retry(backoff=True)  # joined, no assignment yet: ask again
        assigned, self._pending = (self._pending or list(self.owned)), None
        if self.state is not MemberState.STABLE:
            log.info(
                "group %s: member %s at epoch %d, %d partition(s)",
                self.group_id,
                self.member_id,
                self.generation,
                len(assigned),
            )
        self.state = MemberState.STABLE
        self.rejoin_needed = False
        self.lost = False
        self.owned = list(assigned)
        self._heartbeat_now.set()
        return assigned

    async def _heartbeat_once(self) -> bool:
        try:
            await self._beat(None, owned=False)
        except _Retry:
            return False
        if self._pending is not None and set(self._pending) != set(self.owned):
            self.request_rejoin("the coordinator sent a new assignment")
        return True

    async def leave(self, reason: str) -> None:
        if not self.member_id or self.generation <= 0:
            return
        request = ConsumerGroupHeartbeatRequest(
            group_id=self.group_id,
            member_id=self.member_id,
            member_epoch=LEAVE_EPOCH if self.instance_id is None else -2,
            instance_id=self.instance_id,
        )
        try:
            with trio.move_on_after(self.config.request_timeout_ms / 1000):
                await self._request(request)
        except (NetworkError, KafkaError) as exc:
            log.debug("group %s: leaving failed: %s", self.group_id, exc)
        log.info("group %s: member %s left (%s)", self.group_id, self.member_id, reason)
        self.generation = NO_GENERATION
        self.state = MemberState.UNJOINED
