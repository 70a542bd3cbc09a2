"""Heartbeat (key 12): a group member keeps its membership alive."""

from __future__ import annotations

from typing import Annotated

from gregor.protocol.schema import Int16, Int32, Request, Response, V


class HeartbeatRequest(Request, api_key=12, valid="0-4", flexible="4+"):
    group_id: str = ""
    generation_id: Int32 = 0
    member_id: str = ""
    group_instance_id: Annotated[str | None, V("3+")] = None


class HeartbeatResponse(Response, api_key=12, valid="0-4", flexible="4+"):
    throttle_time_ms: Annotated[Int32, V("1+", ignorable=True)] = 0
    error_code: Int16 = 0
