"""ApiVersions: which APIs and versions this broker implements (derived from the registry).

The unsupported-version case (error 35 in a v0 body) is answered by the network layer,
which never decodes such a request's body.
"""

from __future__ import annotations

import re

from gregor.broker.apis import RequestContext, handles, supported_api_versions
from gregor.protocol.apis import ApiKey
from gregor.protocol.apis.api_versions import ApiVersionsRequest, ApiVersionsResponse
from gregor.protocol.errors import ErrorCode

# KIP-511: client software name and version, checked from v3 on.
_SOFTWARE = re.compile(r"^[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?$")


@handles(ApiKey.API_VERSIONS, "0-4")
async def api_versions(
    ctx: RequestContext, request: ApiVersionsRequest, version: int
) -> ApiVersionsResponse:
    if version >= 3 and not (
        _SOFTWARE.match(request.client_software_name)
        and _SOFTWARE.match(request.client_software_version)
    ):
        return ApiVersionsResponse(error_code=ErrorCode.INVALID_REQUEST)
    return ApiVersionsResponse(api_keys=supported_api_versions())
