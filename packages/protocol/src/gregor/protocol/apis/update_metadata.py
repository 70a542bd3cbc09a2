"""UpdateMetadata (key 6): the controller pushes the cluster metadata cache to a broker."""

from __future__ import annotations

from typing import Annotated
from uuid import UUID

from gregor.protocol.schema import Int8, Int16, Int32, Int64, Request, Response, Struct, V


class UpdateMetadataPartitionState(Struct):
    topic_name: Annotated[str, V("0-4", ignorable=True)] = ""
    partition_index: Int32 = 0
    controller_epoch: Int32 = 0
    leader: Int32 = 0
    leader_epoch: Int32 = 0
    isr: list[Int32] = []
    zk_version: Int32 = 0
    replicas: list[Int32] = []
    offline_replicas: Annotated[list[Int32], V("4+", ignorable=True)] = []


class UpdateMetadataTopicState(Struct):
    topic_name: Annotated[str, V("5+")] = ""
    topic_id: Annotated[UUID, V("7+", ignorable=True)] = UUID(int=0)
    partition_states: Annotated[list[UpdateMetadataPartitionState], V("5+")] = []


class UpdateMetadataEndpoint(Struct):
    port: Annotated[Int32, V("1+")] = 0
    host: Annotated[str, V("1+")] = ""
    listener: Annotated[str, V("3+", ignorable=True)] = ""
    security_protocol: Annotated[Int16, V("1+")] = 0


class UpdateMetadataBroker(Struct):
    id: Int32 = 0
    v0_host: Annotated[str, V("0", ignorable=True)] = ""
    v0_port: Annotated[Int32, V("0", ignorable=True)] = 0
    endpoints: Annotated[list[UpdateMetadataEndpoint], V("1+", ignorable=True)] = []
    rack: Annotated[str | None, V("2+", ignorable=True)] = ""


class UpdateMetadataRequest(Request, api_key=6, valid="0-8", flexible="6+"):
    controller_id: Int32 = 0
    is_kraft_controller: Annotated[bool, V("8+")] = False
    type: Annotated[Int8, V("8+", tag=0)] = 0
    controller_epoch: Int32 = 0
    broker_epoch: Annotated[Int64, V("5+", ignorable=True)] = -1
    ungrouped_partition_states: Annotated[list[UpdateMetadataPartitionState], V("0-4")] = []
    topic_states: Annotated[list[UpdateMetadataTopicState], V("5+")] = []
    live_brokers: list[UpdateMetadataBroker] = []


class UpdateMetadataResponse(Response, api_key=6, valid="0-8", flexible="6+"):
    error_code: Int16 = 0
