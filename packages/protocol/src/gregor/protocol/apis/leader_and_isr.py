"""LeaderAndIsr (key 4): the controller tells a broker which replicas it leads or follows."""

from __future__ import annotations

from typing import Annotated
from uuid import UUID

from gregor.protocol.schema import Int8, Int16, Int32, Int64, Request, Response, Struct, V


class LeaderAndIsrPartitionState(Struct):
    topic_name: Annotated[str, V("0-1", ignorable=True)] = ""
    partition_index: Int32 = 0
    controller_epoch: Int32 = 0
    leader: Int32 = 0
    leader_epoch: Int32 = 0
    isr: list[Int32] = []
    partition_epoch: Int32 = 0
    replicas: list[Int32] = []
    adding_replicas: Annotated[list[Int32], V("3+", ignorable=True)] = []
    removing_replicas: Annotated[list[Int32], V("3+", ignorable=True)] = []
    is_new: Annotated[bool, V("1+", ignorable=True)] = False
    leader_recovery_state: Annotated[Int8, V("6+")] = 0


class LeaderAndIsrTopicState(Struct):
    topic_name: Annotated[str, V("2+")] = ""
    topic_id: Annotated[UUID, V("5+", ignorable=True)] = UUID(int=0)
    partition_states: Annotated[list[LeaderAndIsrPartitionState], V("2+")] = []


class LeaderAndIsrLiveLeader(Struct):
    broker_id: Int32 = 0
    host_name: str = ""
    port: Int32 = 0


class LeaderAndIsrRequest(Request, api_key=4, valid="0-7", flexible="4+"):
    controller_id: Int32 = 0
    is_kraft_controller: Annotated[bool, V("7+")] = False
    controller_epoch: Int32 = 0
    broker_epoch: Annotated[Int64, V("2+", ignorable=True)] = -1
    type: Annotated[Int8, V("5+")] = 0
    ungrouped_partition_states: Annotated[list[LeaderAndIsrPartitionState], V("0-1")] = []
    topic_states: Annotated[list[LeaderAndIsrTopicState], V("2+")] = []
    live_leaders: list[LeaderAndIsrLiveLeader] = []


class LeaderAndIsrPartitionError(Struct):
    topic_name: Annotated[str, V("0-4", ignorable=True)] = ""
    partition_index: Int32 = 0
    error_code: Int16 = 0


class LeaderAndIsrTopicError(Struct):
    topic_id: Annotated[UUID, V("5+")] = UUID(int=0)
    partition_errors: Annotated[list[LeaderAndIsrPartitionError], V("5+")] = []


class LeaderAndIsrResponse(Response, api_key=4, valid="0-7", flexible="4+"):
    error_code: Int16 = 0
    partition_errors: Annotated[list[LeaderAndIsrPartitionError], V("0-4")] = []
    topics: Annotated[list[LeaderAndIsrTopicError], V("5+")] = []
