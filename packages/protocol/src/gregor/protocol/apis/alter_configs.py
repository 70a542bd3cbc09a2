"""AlterConfigs (key 33): replace a resource's whole configuration."""

from __future__ import annotations

from gregor.protocol.schema import Int8, Int16, Int32, Request, Response, Struct


class AlterableConfig(Struct):
    name: str = ""
    value: str | None = ""


class AlterConfigsResource(Struct):
    resource_type: Int8 = 0
    resource_name: str = ""
    configs: list[AlterableConfig] = []


class AlterConfigsRequest(Request, api_key=33, valid="0-2", flexible="2+"):
    resources: list[AlterConfigsResource] = []
    validate_only: bool = False


class AlterConfigsResourceResponse(Struct):
    error_code: Int16 = 0
    error_message: str | None = ""
    resource_type: Int8 = 0
    resource_name: str = ""


class AlterConfigsResponse(Response, api_key=33, valid="0-2", flexible="2+"):
    throttle_time_ms: Int32 = 0
    responses: list[AlterConfigsResourceResponse] = []
