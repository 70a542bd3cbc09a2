"""The marker channel: WriteTxnMarkers to the leaders of a transaction's partitions.

Once a transaction is PrepareCommit or PrepareAbort in the log, the coordinator has the
leader of each of its partitions write the COMMIT or ABORT marker, carrying the coordinator
epoch (the `__transaction_state` partition's leader epoch). Partitions are grouped by their
current leader, one request per leader at a time; what a leader could not write yet (it is
not the leader any more, the ISR is short, the broker is down) is sent again after a short
backoff, to whichever broker leads the partition then. A partition whose topic is gone is
dropped, as Kafka drops it. The channel stops, reporting failure, when this broker is no
longer the coordinator of that epoch (the new coordinator completes the transaction) or a
leader says the coordinator was fenced.

The transport (which broker leads a partition, a request to a broker) is a protocol; the
broker gives one on its inter-broker connections (`channel.InterBrokerMarkerTransport`).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Final, Protocol

import trio

from gregor.broker.coordinator.transaction.state import TopicPartition
from gregor.protocol.apis.write_txn_markers import (
    WritableTxnMarker,
    WritableTxnMarkerTopic,
    WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
)
from gregor.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

NO_LEADER: Final = -1

# Per-partition answers after which the marker is sent again (to the leader of then).
_RETRIABLE: Final = frozenset(
    {
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.NOT_ENOUGH_REPLICAS,
        ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        ErrorCode.REQUEST_TIMED_OUT,
        ErrorCode.KAFKA_STORAGE_ERROR,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.NETWORK_EXCEPTION,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.UNKNOWN_SERVER_ERROR,
    }
)
# ... after which this coordinator gives the transaction up: a newer one exists.
_FENCED: Final = frozenset(
    {ErrorCode.TRANSACTION_COORDINATOR_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH}
)


class MarkerTransport(Protocol):
    def leader_of(self, topic: str, partition: int) -> int | None:
        """The partition's leader, NO_LEADER while it has none, None if it does not exist."""

    async def send(
        self, broker_id: int, request: WriteTxnMarkersRequest
    ) -> WriteTxnMarkersResponse:
        """Send to the broker; raises (any Exception) when the broker cannot be reached."""


def marker_request(
    producer_id: int,
    producer_epoch: int,
    commit: bool,
    coordinator_epoch: int,
    partitions: Iterable[TopicPartition],
) -> WriteTxnMarkersRequest:
    by_topic: dict[str, list[int]] = defaultdict(list)
    for topic, partition in sorted(partitions):
        by_topic[topic].append(partition)
    return WriteTxnMarkersRequest(
        markers=[
            WritableTxnMarker(
                producer_id=producer_id,
                producer_epoch=producer_epoch,
                transaction_result=commit,
                topics=[WritableTxnMarkerTopic(t, parts) for t, parts in by_topic.items()],
                coordinator_epoch=coordinator_epoch,
            )
        ]
    )


class TxnMarkerChannel:
    def __init__(self, transport: MarkerTransport, retry_backoff_s: float = 0.1) -> None:
        self.transport = transport
        self.retry_backoff_s = retry_backoff_s

    async def write_markers(
        self,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        coordinator_epoch: int,
        partitions: Iterable[TopicPartition],
        still_coordinator: Callable[[], bool],
    ) -> bool:
        """Have every partition's leader write the marker; True once all did (or their
        topics are gone), False if this coordinator must leave the transaction to another."""
        pending = set(partitions)
        what = f"{'COMMIT' if commit else 'ABORT'} of producer {producer_id}/{producer_epoch}"
        while pending:
            if not still_coordinator():
                log.info("%s: not the coordinator any more; leaving the markers", what)
                return False
            by_leader: dict[int, set[TopicPartition]] = defaultdict(set)
            for tp in list(pending):
                leader = self.transport.leader_of(*tp)
                if leader is None:
                    log.info("%s: %s-%d is gone; no marker for it", what, *tp)
                    pending.discard(tp)
                elif leader != NO_LEADER:
                    by_leader[leader].add(tp)
            fenced = False

            async def send(leader: int, tps: set[TopicPartition]) -> None:
                nonlocal fenced
                request = marker_request(
                    producer_id, producer_epoch, commit, coordinator_epoch, tps
                )
                try:
                    response = await self.transport.send(leader, request)
                except Exception as exc:  # the broker is unreachable: try again later
                    log.info("%s: broker %d unreachable: %r", what, leader, exc)
                    return
                for result in response.markers:
                    for topic in result.topics:
                        for part in topic.partitions:
                            tp = (topic.name, part.partition_index)
                            error = part.error_code
                            if error == ErrorCode.NONE or tp not in tps:
                                pending.discard(tp)
                            elif error in _FENCED:
                                log.warning(
                                    "%s: %s-%d answered %s", what, *tp, ErrorCode(error).name
                                )
                                fenced = True
                            elif error not in _RETRIABLE:
                                # Kafka treats the rest (unsupported formats) as done.
                                log.error(
                                    "%s: %s-%d cannot take the marker: %s",
                                    what,
                                    *tp,
                                    ErrorCode(error).name,
                                )
                                pending.discard(tp)

            async with trio.open_nursery() as nursery:
                for leader, tps in by_leader.items():
                    nursery.start_soon(send, leader, tps)
            if fenced:
                return False
            if pending:
                await trio.sleep(self.retry_backoff_s)
        return True
