"""Finding the broker that coordinates a consumer group or a transactional id."""

from __future__ import annotations

import enum

import trio

from gregor.client.network import BOOTSTRAP, NetworkClient
from gregor.protocol.apis.find_coordinator import FindCoordinatorRequest, FindCoordinatorResponse
from gregor.protocol.errors import ErrorCode, KafkaError, NetworkError, RequestTimedOutError


class CoordinatorType(enum.IntEnum):
    GROUP = 0
    TRANSACTION = 1


async def find_coordinator(
    client: NetworkClient, key: str, key_type: CoordinatorType, timeout: float
) -> int:
    """The pseudo node id of a dedicated connection to `key`'s coordinator; retriable
    errors (no coordinator yet, loading, a broker down) are retried until `timeout`."""
    what = f"{key_type.name.lower()} {key!r}"
    last: Exception | None = None
    attempts = 0
    with trio.move_on_after(timeout):
        while True:
            try:
                return await _find_once(client, key, key_type)
            except (NetworkError, KafkaError) as exc:
                if isinstance(exc, KafkaError) and not exc.retriable:
                    raise
                last = exc
            await trio.sleep(client.retry_backoff.delay(attempts))
            attempts += 1
    raise RequestTimedOutError(f"no coordinator found for {what} within {timeout:.1f}s: {last}")


async def _find_once(client: NetworkClient, key: str, key_type: CoordinatorType) -> int:
    connection = await client.connect(BOOTSTRAP)
    version = connection.version_for(FindCoordinatorRequest)
    if version >= 4:
        request = FindCoordinatorRequest(key_type=key_type, coordinator_keys=[key])
    else:
        request = FindCoordinatorRequest(key=key, key_type=key_type)
    response = await client.send(connection, request, version)
    assert isinstance(response, FindCoordinatorResponse)
    if version >= 4:
        if not response.coordinators:
            raise KafkaError.for_code(ErrorCode.COORDINATOR_NOT_AVAILABLE)(
                f"FindCoordinator for {key!r} answered no coordinator"
            )
        found = response.coordinators[0]
        error, message = found.error_code, found.error_message
        node_id, host, port = found.node_id, found.host, found.port
    else:
        error, message = response.error_code, response.error_message
        node_id, host, port = response.node_id, response.host, response.port
    if error:
        raise KafkaError.for_code(error)(
            f"FindCoordinator for {key_type.name.lower()} {key!r}: "
            f"{KafkaError.for_code(error).error_name()}{': ' + message if message else ''}"
        )
    return client.coordinator_node(node_id, host, port)
