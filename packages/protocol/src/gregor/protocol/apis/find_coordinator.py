"""FindCoordinator (key 10): which broker coordinates a group or a transactional id."""

from __future__ import annotations

from typing import Annotated

from gregor.protocol.schema import Int8, Int16, Int32, Request, Response, Struct, V


class FindCoordinatorRequest(Request, api_key=10, valid="0-6", flexible="3+"):
    key: Annotated[str, V("0-3")] = ""
    key_type: Annotated[Int8, V("1+")] = 0
    coordinator_keys: Annotated[list[str], V("4+")] = []


class Coordinator(Struct):
    key: Annotated[str, V("4+")] = ""
    node_id: Annotated[Int32, V("4+")] = 0
    host: Annotated[str, V("4+")] = ""
    port: Annotated[Int32, V("4+")] = 0
    error_code: Annotated[Int16, V("4+")] = 0
    error_message: Annotated[str | None, V("4+", ignorable=True)] = ""


class FindCoordinatorResponse(Response, api_key=10, valid="0-6", flexible="3+"):
    throttle_time_ms: Annotated[Int32, V("1+", ignorable=True)] = 0
    error_code: Annotated[Int16, V("0-3")] = 0
    error_message: Annotated[str | None, V("1-3", ignorable=True)] = ""
    node_id: Annotated[Int32, V("0-3")] = 0
    host: Annotated[str, V("0-3")] = ""
    port: Annotated[Int32, V("0-3")] = 0
    coordinators: Annotated[list[Coordinator], V("4+")] = []
