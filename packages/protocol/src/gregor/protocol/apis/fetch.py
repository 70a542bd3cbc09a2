"""Fetch (key 1): consumers and follower replicas read record batches from a leader."""

from __future__ import annotations

from typing import Annotated
from uuid import UUID

from gregor.protocol.schema import Int8, Int16, Int32, Int64, Records, Request, Response, Struct, V


class ReplicaState(Struct):
    replica_id: Annotated[Int32, V("15+")] = -1
    replica_epoch: Annotated[Int64, V("15+")] = -1


class FetchPartition(Struct):
    partition: Int32 = 0
    current_leader_epoch: Annotated[Int32, V("9+", ignorable=True)] = -1
    fetch_offset: Int64 = 0
    last_fetched_epoch: Annotated[Int32, V("12+")] = -1
    log_start_offset: Annotated[Int64, V("5+", ignorable=True)] = -1
    partition_max_bytes: Int32 = 0
    replica_directory_id: Annotated[UUID, V("17+", tag=0, ignorable=True)] = UUID(int=0)


class FetchTopic(Struct):
    topic: Annotated[str, V("0-12", ignorable=True)] = ""
    topic_id: Annotated[UUID, V("13+", ignorable=True)] = UUID(int=0)
    partitions: list[FetchPartition] = []


class ForgottenTopic(Struct):
    topic: Annotated[str, V("7-12", ignorable=True)] = ""
    topic_id: Annotated[UUID, V("13+", ignorable=True)] = UUID(int=0)
    partitions: Annotated[list[Int32], V("7+")] = []


class FetchRequest(Request, api_key=1, valid="0-17", flexible="12+"):
    cluster_id: Annotated[str | None, V("12+", tag=0, ignorable=True)] = None
    replica_id: Annotated[Int32, V("0-14")] = -1
    replica_state: Annotated[ReplicaState, V("15+", tag=1)] = ReplicaState()
    max_wait_ms: Int32 = 0
    min_bytes: Int32 = 0
    max_bytes: Annotated[Int32, V("3+", ignorable=True)] = 2147483647
    isolation_level: Annotated[Int8, V("4+", ignorable=True)] = 0
    session_id: Annotated[Int32, V("7+", ignorable=True)] = 0
    session_epoch: Annotated[Int32, V("7+", ignorable=True)] = -1
    topics: list[FetchTopic] = []
    forgotten_topics_data: Annotated[list[ForgottenTopic], V("7+")] = []
    rack_id: Annotated[str, V("11+", ignorable=True)] = ""


class EpochEndOffset(Struct):
    epoch: Annotated[Int32, V("12+")] = -1
    end_offset: Annotated[Int64, V("12+")] = -1


class LeaderIdAndEpoch(Struct):
    leader_id: Annotated[Int32, V("12+")] = -1
    leader_epoch: Annotated[Int32, V("12+")] = -1


class SnapshotId(Struct):
    end_offset: Int64 = -1
    epoch: Int32 = -1


class AbortedTransaction(Struct):
    producer_id: Annotated[Int64, V("4+")] = 0
    first_offset: Annotated[Int64, V("4+")] = 0


class PartitionData(Struct):
    partition_index: Int32 = 0
    error_code: Int16 = 0
    high_watermark: Int64 = 0
    last_stable_offset: Annotated[Int64, V("4+", ignorable=True)] = -1
    log_start_offset: Annotated[Int64, V("5+", ignorable=True)] = -1
    diverging_epoch: Annotated[EpochEndOffset, V("12+", tag=0)] = EpochEndOffset()
    current_leader: Annotated[LeaderIdAndEpoch, V("12+", tag=1)] = LeaderIdAndEpoch()
    snapshot_id: Annotated[SnapshotId, V("12+", tag=2)] = SnapshotId()
    aborted_transactions: Annotated[list[AbortedTransaction] | None, V("4+", ignorable=True)] = []
    preferred_read_replica: Annotated[Int32, V("11+")] = -1
    records: Records | None = None


class FetchableTopicResponse(Struct):
    topic: Annotated[str, V("0-12", ignorable=True)] = ""
    topic_id: Annotated[UUID, V("13+", ignorable=True)] = UUID(int=0)
    partitions: list[PartitionData] = []


class NodeEndpoint(Struct):
    node_id: Annotated[Int32, V("16+")] = 0
    host: Annotated[str, V("16+")] = ""
    port: Annotated[Int32, V("16+")] = 0
    rack: Annotated[str | None, V("16+")] = None


class FetchResponse(Response, api_key=1, valid="0-17", flexible="12+"):
    throttle_time_ms: Annotated[Int32, V("1+", ignorable=True)] = 0
    error_code: Annotated[Int16, V("7+", ignorable=True)] = 0
    session_id: Annotated[Int32, V("7+")] = 0
    responses: list[FetchableTopicResponse] = []
    node_endpoints: Annotated[list[NodeEndpoint], V("16+", tag=0)] = []
