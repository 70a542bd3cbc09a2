"""The handler registry: what ApiVersions advertises is exactly what handlers implement."""

from __future__ import annotations

import pytest

from gregor.broker import apis
from gregor.protocol.apis import REQUESTS, ApiKey


def test_api_versions_table_matches_the_registered_handlers() -> None:
    apis.load_handlers()
    table = {v.api_key: (v.min_version, v.max_version) for v in apis.supported_api_versions()}
    for registration in apis.registrations():
        assert table[registration.api_key] == (registration.versions.lo, registration.versions.hi)
        schema = REQUESTS[registration.api_key].valid_versions
        assert schema.lo <= registration.versions.lo <= registration.versions.hi <= schema.hi
    # The data plane and the inter-broker protocol are there.
    for key in (
        ApiKey.API_VERSIONS,
        ApiKey.METADATA,
        ApiKey.PRODUCE,
        ApiKey.FETCH,
        ApiKey.LIST_OFFSETS,
        ApiKey.OFFSET_FOR_LEADER_EPOCH,
        ApiKey.DELETE_RECORDS,
        ApiKey.LEADER_AND_ISR,
        ApiKey.UPDATE_METADATA,
        ApiKey.STOP_REPLICA,
        ApiKey.DESCRIBE_CLUSTER,
    ):
        assert key in table
    assert apis.api_versions_own_range().max_version == table[ApiKey.API_VERSIONS][1]


def test_registration_is_looked_up_by_key_and_version() -> None:
    apis.load_handlers()
    found = apis.registration(ApiKey.FETCH, 4)
    assert found is not None and found.name == "Fetch"
    assert apis.registration(ApiKey.FETCH, 99) is None
    assert apis.registration(9999, 0) is None


def test_versions_outside_the_schema_are_refused() -> None:
    with pytest.raises(ValueError, match="not within the schema"):
        apis.handles(ApiKey.PRODUCE, "0-99")
    with pytest.raises(ValueError, match="no schema for API key"):
        apis.handles(9999, "0")


def test_a_second_handler_for_an_api_is_refused() -> None:
    apis.load_handlers()

    async def another(ctx: apis.RequestContext, request: object, version: int) -> None:
        return None

    with pytest.raises(ValueError, match="already has a handler"):
        apis.handles(ApiKey.PRODUCE, "3")(another)
