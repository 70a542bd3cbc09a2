"""The answers of a stub broker: a one-broker cluster, built with gregor-protocol alone, as
far as a producing or consuming client can tell.

A stub listener (the captured-traffic tests' threads, the broker benchmark's trio server)
decodes each request and answers with these: ApiVersions with the ranges it chooses,
Metadata naming itself as the leader of every partition of one topic, and Produce with base
offsets counted per partition. How records are counted, and what a Fetch gets, is the
listener's business.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, MutableMapping

from gregor.protocol.apis import api_versions, metadata, produce
from gregor.protocol.errors import ErrorCode

Records = bytes | bytearray | memoryview


def api_versions_answer(ranges: Mapping[int, tuple[int, int]]) -> api_versions.ApiVersionsResponse:
    """ApiVersions listing these (lowest, highest) version ranges by API key."""
    return api_versions.ApiVersionsResponse(
        api_keys=[api_versions.ApiVersion(key, lo, hi) for key, (lo, hi) in ranges.items()]
    )


def metadata_answer(
    request: metadata.MetadataRequest,
    *,
    node_id: int,
    port: int,
    topic: str,
    partitions: int,
    cluster_id: str,
    topic_id: uuid.UUID | None = None,
) -> metadata.MetadataResponse:
    """The one broker (on 127.0.0.1:`port`) leads every partition of `topic`; any other topic
    asked for is UNKNOWN_TOPIC_OR_PARTITION. No topics asked: all of them, i.e. `topic`."""
    no_id = uuid.UUID(int=0)
    names = [topic] if request.topics is None else [t.name for t in request.topics]
    return metadata.MetadataResponse(
        brokers=[metadata.MetadataResponseBroker(node_id, "127.0.0.1", port)],
        cluster_id=cluster_id,
        controller_id=node_id,
        topics=[
            metadata.MetadataResponseTopic(
                error_code=ErrorCode.NONE
                if name == topic
                else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                name=name,
                topic_id=(topic_id or no_id) if name == topic else no_id,
                partitions=[
                    metadata.MetadataResponsePartition(
                        partition_index=index,
                        leader_id=node_id,
                        leader_epoch=0,
                        replica_nodes=[node_id],
                        isr_nodes=[node_id],
                    )
                    for index in range(partitions if name == topic else 0)
                ],
            )
            for name in names
        ],
    )


def produce_answer(
    request: produce.ProduceRequest,
    next_offsets: MutableMapping[int, int],
    count: Callable[[Records], int],
) -> produce.ProduceResponse:
    """Every partition's records accepted at the next offset of that partition (by index,
    as the stub has one topic); `count(records)` says how many records a partition got."""
    topics = []
    for topic in request.topic_data:
        parts = []
        for data in topic.partition_data:
            base = next_offsets.get(data.index, 0)
            next_offsets[data.index] = base + count(data.records or b"")
            parts.append(produce.PartitionProduceResponse(index=data.index, base_offset=base))
        topics.append(produce.TopicProduceResponse(name=topic.name, partition_responses=parts))
    return produce.ProduceResponse(responses=topics)
