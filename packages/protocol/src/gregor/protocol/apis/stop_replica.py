"""StopReplica (key 5): the controller tells a broker to stop (and maybe delete) replicas."""

from __future__ import annotations

from typing import Annotated

from gregor.protocol.schema import Int16, Int32, Int64, Request, Response, Struct, V


class StopReplicaPartitionV0(Struct):
    topic_name: Annotated[str, V("0")] = ""
    partition_index: Annotated[Int32, V("0")] = 0


class StopReplicaTopicV1(Struct):
    name: Annotated[str, V("1-2")] = ""
    partition_indexes: Annotated[list[Int32], V("1-2")] = []


class StopReplicaPartitionState(Struct):
    partition_index: Annotated[Int32, V("3+")] = 0
    leader_epoch: Annotated[Int32, V("3+")] = -1
    delete_partition: Annotated[bool, V("3+")] = False


class StopReplicaTopicState(Struct):
    topic_name: Annotated[str, V("3+")] = ""
    partition_states: Annotated[list[StopReplicaPartitionState], V("3+")] = []


class StopReplicaRequest(Request, api_key=5, valid="0-4", flexible="2+"):
    controller_id: Int32 = 0
    is_kraft_controller: Annotated[bool, V("4+")] = False
    controller_epoch: Int32 = 0
    broker_epoch: Annotated[Int64, V("1+", ignorable=True)] = -1
    delete_partitions: Annotated[bool, V("0-2")] = False
    ungrouped_partitions: Annotated[list[StopReplicaPartitionV0], V("0")] = []
    topics: Annotated[list[StopReplicaTopicV1], V("1-2")] = []
    topic_states: Annotated[list[StopReplicaTopicState], V("3+")] = []


class StopReplicaPartitionError(Struct):
    topic_name: str = ""
    partition_index: Int32 = 0
    error_code: Int16 = 0


class StopReplicaResponse(Response, api_key=5, valid="0-4", flexible="2+"):
    error_code: Int16 = 0
    partition_errors: list[StopReplicaPartitionError] = []
