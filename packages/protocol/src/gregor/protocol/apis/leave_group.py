"""LeaveGroup (key 13): members leave a consumer group."""

from __future__ import annotations

from typing import Annotated

from gregor.protocol.schema import Int16, Int32, Request, Response, Struct, V


class MemberIdentity(Struct):
    member_id: Annotated[str, V("3+")] = ""
    group_instance_id: Annotated[str | None, V("3+")] = None
    reason: Annotated[str | None, V("5+", ignorable=True)] = None


class LeaveGroupRequest(Request, api_key=13, valid="0-5", flexible="4+"):
    group_id: str = ""
    member_id: Annotated[str, V("0-2")] = ""
    members: Annotated[list[MemberIdentity], V("3+")] = []


class MemberResponse(Struct):
    member_id: Annotated[str, V("3+")] = ""
    group_instance_id: Annotated[str | None, V("3+")] = ""
    error_code: Annotated[Int16, V("3+")] = 0


class LeaveGroupResponse(Response, api_key=13, valid="0-5", flexible="4+"):
    throttle_time_ms: Annotated[Int32, V("1+", ignorable=True)] = 0
    error_code: Int16 = 0
    members: Annotated[list[MemberResponse], V("3+")] = []
