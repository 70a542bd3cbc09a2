"""CreateTopics (key 19): create topics with partition counts, replication and configs."""

from __future__ import annotations

from typing import Annotated
from uuid import UUID

from gregor.protocol.schema import Int8, Int16, Int32, Request, Response, Struct, V


class CreatableReplicaAssignment(Struct):
    partition_index: Int32 = 0
    broker_ids: list[Int32] = []


class CreatableTopicConfig(Struct):
    name: str = ""
    value: str | None = ""


class CreatableTopic(Struct):
    name: str = ""
    num_partitions: Int32 = 0
    replication_factor: Int16 = 0
    assignments: list[CreatableReplicaAssignment] = []
    configs: list[CreatableTopicConfig] = []


class CreateTopicsRequest(Request, api_key=19, valid="0-7", flexible="5+"):
    topics: list[CreatableTopic] = []
    timeout_ms: Int32 = 60000
    validate_only: Annotated[bool, V("1+")] = False


class CreatableTopicConfigs(Struct):
    name: Annotated[str, V("5+")] = ""
    value: Annotated[str | None, V("5+")] = ""
    read_only: Annotated[bool, V("5+")] = False
    config_source: Annotated[Int8, V("5+", ignorable=True)] = -1
    is_sensitive: Annotated[bool, V("5+")] = False


class CreatableTopicResult(Struct):
    name: str = ""
    topic_id: Annotated[UUID, V("7+", ignorable=True)] = UUID(int=0)
    error_code: Int16 = 0
    error_message: Annotated[str | None, V("1+", ignorable=True)] = ""
    topic_config_error_code: Annotated[Int16, V("5+", tag=0, ignorable=True)] = 0
    num_partitions: Annotated[Int32, V("5+", ignorable=True)] = -1
    replication_factor: Annotated[Int16, V("5+", ignorable=True)] = -1
    configs: Annotated[list[CreatableTopicConfigs] | None, V("5+", ignorable=True)] = []


class CreateTopicsResponse(Response, api_key=19, valid="0-7", flexible="5+"):
    throttle_time_ms: Annotated[Int32, V("2+", ignorable=True)] = 0
    topics: list[CreatableTopicResult] = []
