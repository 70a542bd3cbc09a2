"""ApiVersions (key 18): which APIs and versions a broker supports."""

from __future__ import annotations

from typing import Annotated

from gregor.protocol.schema import Int16, Int32, Int64, Request, Response, Struct, V


class ApiVersionsRequest(Request, api_key=18, valid="0-4", flexible="3+"):
    client_software_name: Annotated[str, V("3+", ignorable=True)] = ""
    client_software_version: Annotated[str, V("3+", ignorable=True)] = ""


class ApiVersion(Struct):
    api_key: Int16 = 0
    min_version: Int16 = 0
    max_version: Int16 = 0


class SupportedFeatureKey(Struct):
    name: Annotated[str, V("3+")] = ""
    min_version: Annotated[Int16, V("3+")] = 0
    max_version: Annotated[Int16, V("3+")] = 0


class FinalizedFeatureKey(Struct):
    name: Annotated[str, V("3+")] = ""
    max_version_level: Annotated[Int16, V("3+")] = 0
    min_version_level: Annotated[Int16, V("3+")] = 0


class ApiVersionsResponse(Response, api_key=18, valid="0-4", flexible="3+"):
    error_code: Int16 = 0
    api_keys: list[ApiVersion] = []
    throttle_time_ms: Annotated[Int32, V("1+", ignorable=True)] = 0
    supported_features: Annotated[list[SupportedFeatureKey], V("3+", tag=0, ignorable=True)] = []
    finalized_features_epoch: Annotated[Int64, V("3+", tag=1, ignorable=True)] = -1
    finalized_features: Annotated[list[FinalizedFeatureKey], V("3+", tag=2, ignorable=True)] = []
    zk_migration_ready: Annotated[bool, V("3+", tag=3, ignorable=True)] = False
