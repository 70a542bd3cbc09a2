"""DescribeClientQuotas (key 48): the quotas that match entity filters."""

from __future__ import annotations

from gregor.protocol.schema import Float64, Int8, Int16, Int32, Request, Response, Struct


class ComponentData(Struct):
    entity_type: str = ""
    match_type: Int8 = 0
    match: str | None = ""


class DescribeClientQuotasRequest(Request, api_key=48, valid="0-1", flexible="1+"):
    components: list[ComponentData] = []
    strict: bool = False


class EntityData(Struct):
    entity_type: str = ""
    entity_name: str | None = ""


class ValueData(Struct):
    key: str = ""
    value: Float64 = 0.0


class EntryData(Struct):
    entity: list[EntityData] = []
    values: list[ValueData] = []


class DescribeClientQuotasResponse(Response, api_key=48, valid="0-1", flexible="1+"):
    throttle_time_ms: Int32 = 0
    error_code: Int16 = 0
    error_message: str | None = ""
    entries: list[EntryData] | None = []
