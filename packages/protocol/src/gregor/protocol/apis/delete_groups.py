"""DeleteGroups (key 42): delete empty consumer groups."""

from __future__ import annotations

from gregor.protocol.schema import Int16, Int32, Request, Response, Struct


class DeleteGroupsRequest(Request, api_key=42, valid="0-2", flexible="2+"):
    groups_names: list[str] = []


class DeletableGroupResult(Struct):
    group_id: str = ""
    error_code: Int16 = 0


class DeleteGroupsResponse(Response, api_key=42, valid="0-2", flexible="2+"):
    throttle_time_ms: Int32 = 0
    results: list[DeletableGroupResult] = []
