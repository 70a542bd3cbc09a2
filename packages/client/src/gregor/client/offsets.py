"""ListOffsets: the offset of a timestamp (or the earliest / latest) on each partition.

Requests go to each partition's leader; partitions whose leader moved or is unknown are
asked again after a metadata refresh, until the timeout. Used by the consumer (position
resets, offsets_for_times, beginning_offsets, end_offsets) and the admin client.
"""

from __future__ import annotations

from collections.abc import Mapping

import trio

from gregor.client.network import NetworkClient
from gregor.client.types import OffsetAndTimestamp, TopicPartition
from gregor.protocol.apis.list_offsets import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsResponse,
    ListOffsetsTopic,
)
from gregor.protocol.errors import ErrorCode, KafkaError, NetworkError, RequestTimedOutError

EARLIEST = -2
LATEST = -1
MAX_TIMESTAMP = -3  # KIP-734 (ListOffsets v7+)


async def list_offsets(
    client: NetworkClient,
    timestamps: Mapping[TopicPartition, int],
    timeout: float,
    *,
    read_committed: bool = False,
) -> dict[TopicPartition, OffsetAndTimestamp | None]:
    """For each partition, the first offset whose timestamp is at or after the given one
    (EARLIEST / LATEST for the log's ends); None where no record is that recent."""
    pending = dict(timestamps)
    results: dict[TopicPartition, OffsetAndTimestamp | None] = {}
    last_error: Exception | None = None
    attempts = 0
    client.add_topics({tp.topic for tp in pending})
    with trio.move_on_after(timeout):
        while pending:
            cluster = client.cluster
            by_leader: dict[int, dict[TopicPartition, int]] = {}
            missing = False
            for tp, ts in pending.items():
                leader = cluster.leader_for(tp)
                if leader < 0:
                    missing = True
                else:
                    by_leader.setdefault(leader, {})[tp] = ts
            for node, asked in by_leader.items():
                try:
                    answered = await _ask(client, node, asked, read_committed)
                except (NetworkError, RequestTimedOutError) as exc:
                    last_error = exc
                    missing = True
                    continue
                for tp, outcome in answered.items():
                    if isinstance(outcome, KafkaError):
                        if not (outcome.retriable or outcome.invalid_metadata):
                            raise outcome
                        last_error = outcome
                        missing = True
                    else:
                        results[tp] = outcome
                        pending.pop(tp, None)
            if pending:
                if missing:
                    await client.update_metadata(timeout)
                await trio.sleep(client.retry_backoff.delay(attempts))
                attempts += 1
        return results
    names = ", ".join(str(tp) for tp in sorted(pending))
    raise RequestTimedOutError(
        f"ListOffsets for {names} got no answer within {timeout:.1f}s"
        + (f": {last_error}" if last_error else "")
    )


async def _ask(
    client: NetworkClient, node: int, asked: Mapping[TopicPartition, int], read_committed: bool
) -> dict[TopicPartition, OffsetAndTimestamp | KafkaError | None]:
    connection = await client.connect(node)
    version = connection.version_for(ListOffsetsRequest, min_version=1)
    topics: dict[str, list[ListOffsetsPartition]] = {}
    for tp, ts in asked.items():
        topics.setdefault(tp.topic, []).append(ListOffsetsPartition(tp.partition, -1, ts))
    request = ListOffsetsRequest(
        replica_id=-1,
        isolation_level=1 if read_committed else 0,
        topics=[ListOffsetsTopic(t, ps) for t, ps in topics.items()],
    )
    response = await client.send(connection, request, version)
    assert isinstance(response, ListOffsetsResponse)
    where = str(client.cluster.broker(node) or f"broker {node}")
    out: dict[TopicPartition, OffsetAndTimestamp | KafkaError | None] = {}
    for topic in response.topics:
        for p in topic.partitions:
            tp = TopicPartition(topic.name, p.partition_index)
            if p.error_code != ErrorCode.NONE:
                error = KafkaError.for_code(p.error_code)
                out[tp] = error(f"ListOffsets for {tp} on {where}: {error.error_name()}")
            elif p.offset < 0:
                out[tp] = None
            else:
                epoch = p.leader_epoch if p.leader_epoch >= 0 else None
                out[tp] = OffsetAndTimestamp(p.offset, p.timestamp, epoch)
    return out
