"""AlterClientQuotas (key 49): set or remove quotas of users and client ids."""

from __future__ import annotations

from gregor.protocol.schema import Float64, Int16, Int32, Request, Response, Struct


# Kafka declares this struct twice, once in the request and once in the response, with the
# same fields; one class serves both. EntryData differs between them, hence the prefixes.
class EntityData(Struct):
    entity_type: str = ""
    entity_name: str | None = ""


class OpData(Struct):
    key: str = ""
    value: Float64 = 0.0
    remove: bool = False


class RequestEntryData(Struct):
    entity: list[EntityData] = []
    ops: list[OpData] = []


class AlterClientQuotasRequest(Request, api_key=49, valid="0-1", flexible="1+"):
    entries: list[RequestEntryData] = []
    validate_only: bool = False


class ResponseEntryData(Struct):
    error_code: Int16 = 0
    error_message: str | None = ""
    entity: list[EntityData] = []


class AlterClientQuotasResponse(Response, api_key=49, valid="0-1", flexible="1+"):
    throttle_time_ms: Int32 = 0
    entries: list[ResponseEntryData] = []
