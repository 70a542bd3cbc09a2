"""ElectLeaders (key 43): run preferred or unclean leader elections."""

from __future__ import annotations

from typing import Annotated

from gregor.protocol.schema import Int8, Int16, Int32, Request, Response, Struct, V


class TopicPartitions(Struct):
    topic: str = ""
    partitions: list[Int32] = []


class ElectLeadersRequest(Request, api_key=43, valid="0-2", flexible="2+"):
    election_type: Annotated[Int8, V("1+")] = 0
    topic_partitions: list[TopicPartitions] | None = []
    timeout_ms: Int32 = 60000


class PartitionResult(Struct):
    partition_id: Int32 = 0
    error_code: Int16 = 0
    error_message: str | None = ""


class ReplicaElectionResult(Struct):
    topic: str = ""
    partition_result: list[PartitionResult] = []


class ElectLeadersResponse(Response, api_key=43, valid="0-2", flexible="2+"):
    throttle_time_ms: Int32 = 0
    error_code: Annotated[Int16, V("1+")] = 0
    replica_election_results: list[ReplicaElectionResult] = []
