"""SyncGroup (key 14): the group leader hands out assignments; members receive theirs."""

from __future__ import annotations

from typing import Annotated

from gregor.protocol.schema import Int16, Int32, Request, Response, Struct, V


class SyncGroupRequestAssignment(Struct):
    member_id: str = ""
    assignment: bytes = b""


class SyncGroupRequest(Request, api_key=14, valid="0-5", flexible="4+"):
    group_id: str = ""
    generation_id: Int32 = 0
    member_id: str = ""
    group_instance_id: Annotated[str | None, V("3+")] = None
    protocol_type: Annotated[str | None, V("5+", ignorable=True)] = None
    protocol_name: Annotated[str | None, V("5+", ignorable=True)] = None
    assignments: list[SyncGroupRequestAssignment] = []


class SyncGroupResponse(Response, api_key=14, valid="0-5", flexible="4+"):
    throttle_time_ms: Annotated[Int32, V("1+", ignorable=True)] = 0
    error_code: Int16 = 0
    protocol_type: Annotated[str | None, V("5+", ignorable=True)] = None
    protocol_name: Annotated[str | None, V("5+", ignorable=True)] = None
    assignment: bytes = b""
