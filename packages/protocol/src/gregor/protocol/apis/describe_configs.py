"""DescribeConfigs (key 32): the configuration of topics, brokers and other resources."""

from __future__ import annotations

from typing import Annotated

from gregor.protocol.schema import Int8, Int16, Int32, Request, Response, Struct, V


class DescribeConfigsResource(Struct):
    resource_type: Int8 = 0
    resource_name: str = ""
    configuration_keys: list[str] | None = []


class DescribeConfigsRequest(Request, api_key=32, valid="0-4", flexible="4+"):
    resources: list[DescribeConfigsResource] = []
    include_synonyms: Annotated[bool, V("1+")] = False
    include_documentation: Annotated[bool, V("3+")] = False


class DescribeConfigsSynonym(Struct):
    name: Annotated[str, V("1+")] = ""
    value: Annotated[str | None, V("1+")] = ""
    source: Annotated[Int8, V("1+")] = 0


class DescribeConfigsResourceResult(Struct):
    name: str = ""
    value: str | None = ""
    read_only: bool = False
    is_default: Annotated[bool, V("0")] = False
    config_source: Annotated[Int8, V("1+", ignorable=True)] = -1
    is_sensitive: bool = False
    synonyms: Annotated[list[DescribeConfigsSynonym], V("1+", ignorable=True)] = []
    config_type: Annotated[Int8, V("3+", ignorable=True)] = 0
    documentation: Annotated[str | None, V("3+", ignorable=True)] = ""


class DescribeConfigsResult(Struct):
    error_code: Int16 = 0
    error_message: str | None = ""
    resource_type: Int8 = 0
    resource_name: str = ""
    configs: list[DescribeConfigsResourceResult] = []


class DescribeConfigsResponse(Response, api_key=32, valid="0-4", flexible="4+"):
    throttle_time_ms: Int32 = 0
    results: list[DescribeConfigsResult] = []
