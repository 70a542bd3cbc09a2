"""AlterReplicaLogDirs (key 34): move replicas between a broker's log directories."""

from __future__ import annotations

from gregor.protocol.schema import Int16, Int32, Request, Response, Struct


class AlterReplicaLogDirTopic(Struct):
    name: str = ""
    partitions: list[Int32] = []


class AlterReplicaLogDir(Struct):
    path: str = ""
    topics: list[AlterReplicaLogDirTopic] = []


class AlterReplicaLogDirsRequest(Request, api_key=34, valid="0-2", flexible="2+"):
    dirs: list[AlterReplicaLogDir] = []


class AlterReplicaLogDirPartitionResult(Struct):
    partition_index: Int32 = 0
    error_code: Int16 = 0


class AlterReplicaLogDirTopicResult(Struct):
    topic_name: str = ""
    partitions: list[AlterReplicaLogDirPartitionResult] = []


class AlterReplicaLogDirsResponse(Response, api_key=34, valid="0-2", flexible="2+"):
    throttle_time_ms: Int32 = 0
    results: list[AlterReplicaLogDirTopicResult] = []
