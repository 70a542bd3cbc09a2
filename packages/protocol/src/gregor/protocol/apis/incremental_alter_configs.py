"""IncrementalAlterConfigs (key 44): set, delete, append or subtract single config entries."""

from __future__ import annotations

from gregor.protocol.schema import Int8, Int16, Int32, Request, Response, Struct


class AlterableConfig(Struct):
    name: str = ""
    config_operation: Int8 = 0
    value: str | None = ""


class AlterConfigsResource(Struct):
    resource_type: Int8 = 0
    resource_name: str = ""
    configs: list[AlterableConfig] = []


class IncrementalAlterConfigsRequest(Request, api_key=44, valid="0-1", flexible="1+"):
    resources: list[AlterConfigsResource] = []
    validate_only: bool = False


class AlterConfigsResourceResponse(Struct):
    error_code: Int16 = 0
    error_message: str | None = ""
    resource_type: Int8 = 0
    resource_name: str = ""


class IncrementalAlterConfigsResponse(Response, api_key=44, valid="0-1", flexible="1+"):
    throttle_time_ms: Int32 = 0
    responses: list[AlterConfigsResourceResponse] = []
