"""Metadata (key 3): brokers, topics, partitions and their leaders."""

from __future__ import annotations

from typing import Annotated
from uuid import UUID

from gregor.protocol.schema import Int16, Int32, Request, Response, Struct, V


class MetadataRequestTopic(Struct):
    topic_id: Annotated[UUID, V("10+", ignorable=True)] = UUID(int=0)
    name: Annotated[str | None, V(nullable="10+")] = ""


class MetadataRequest(Request, api_key=3, valid="0-12", flexible="9+"):
    topics: Annotated[list[MetadataRequestTopic] | None, V(nullable="1+")] = []
    allow_auto_topic_creation: Annotated[bool, V("4+")] = True
    include_cluster_authorized_operations: Annotated[bool, V("8-10")] = False
    include_topic_authorized_operations: Annotated[bool, V("8+")] = False


class MetadataResponseBroker(Struct):
    node_id: Int32 = 0
    host: str = ""
    port: Int32 = 0
    rack: Annotated[str | None, V("1+", ignorable=True)] = None


class MetadataResponsePartition(Struct):
    error_code: Int16 = 0
    partition_index: Int32 = 0
    leader_id: Int32 = 0
    leader_epoch: Annotated[Int32, V("7+", ignorable=True)] = -1
    replica_nodes: list[Int32] = []
    isr_nodes: list[Int32] = []
    offline_replicas: Annotated[list[Int32], V("5+", ignorable=True)] = []


class MetadataResponseTopic(Struct):
    error_code: Int16 = 0
    name: Annotated[str | None, V(nullable="12+")] = ""
    topic_id: Annotated[UUID, V("10+", ignorable=True)] = UUID(int=0)
    is_internal: Annotated[bool, V("1+", ignorable=True)] = False
    partitions: list[MetadataResponsePartition] = []
    topic_authorized_operations: Annotated[Int32, V("8+")] = -2147483648


class MetadataResponse(Response, api_key=3, valid="0-12", flexible="9+"):
    throttle_time_ms: Annotated[Int32, V("3+", ignorable=True)] = 0
    brokers: list[MetadataResponseBroker] = []
    cluster_id: Annotated[str | None, V("2+", ignorable=True)] = None
    controller_id: Annotated[Int32, V("1+", ignorable=True)] = -1
    topics: list[MetadataResponseTopic] = []
    cluster_authorized_operations: Annotated[Int32, V("8-10")] = -2147483648
