"""The request handler registry, the context a handler runs in, and the ApiVersions table.

A handler is registered for an API and a range of versions:

    @handles(ApiKey.PRODUCE, "3-9")
    async def produce(ctx: RequestContext, request: ProduceRequest, version: int)
        -> ProduceResponse | None: ...

It returns the response body, None when the API sends none (Produce with acks=0), or a
`Later` when the response has to wait for something (see there). The network layer decodes
the request at `version` and encodes the response at the same version.

What is advertised in ApiVersions is derived from this registry: an API and a version range
exist for clients only when a handler implements them. A request for anything else is
treated as Kafka treats it: an ApiVersions request of a version we do not know gets error 35
(UNSUPPORTED_VERSION) in a v0 body listing our ApiVersions range; any other unknown API key
or unsupported version closes the connection.

Handler modules live in `gregor.broker.handlers` and register themselves on import;
`load_handlers()` imports them all.
"""

from __future__ import annotations

import importlib
import pkgutil
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import attrs

from gregor.broker.authorization import (
    CLUSTER_NAME,
    NOT_REQUESTED,
    OPERATIONS,
    AclOperation,
    ResourceType,
)
from gregor.broker.purgatory import Delayed
from gregor.broker.services import Services
from gregor.protocol.apis import REQUESTS, ApiKey, api_name
from gregor.protocol.apis.api_versions import ApiVersion
from gregor.protocol.framing import RequestHeader
from gregor.protocol.schema import Response, Versions

ANONYMOUS = "User:ANONYMOUS"


class CloseConnection(Exception):
    """Raised by a handler (or the network layer) to close the connection instead of
    answering, as Kafka does for a Produce with acks=0 that failed. The message is logged."""


@attrs.define(slots=True, eq=False)
class RequestContext:
    """Everything a handler knows about the request besides its body, and the services
    it may use (`gregor.broker.services`)."""

    header: RequestHeader
    services: Services
    client_host: str
    client_port: int
    listener: str  # the listener name (e.g. "PLAINTEXT") the request arrived on
    security_protocol: str = "PLAINTEXT"
    principal: str = ANONYMOUS
    received_at: float = attrs.field(factory=time.monotonic)

    @property
    def api_key(self) -> int:
        return self.header.request_api_key

    @property
    def api_version(self) -> int:
        return self.header.request_api_version

    @property
    def correlation_id(self) -> int:
        return self.header.correlation_id

    @property
    def client_id(self) -> str:
        return self.header.client_id or ""

    @property
    def connection_id(self) -> str:
        return f"{self.listener}-{self.client_host}:{self.client_port}"

    def authorized(
        self,
        operation: AclOperation,
        resource_type: ResourceType = ResourceType.CLUSTER,
        name: str = CLUSTER_NAME,
    ) -> bool:
        """Whether this request's principal, from its host, may do `operation` on the
        resource (the cluster when none is named); see `gregor.broker.authorization`."""
        return self.services.authorizer.authorize(
            self.principal, self.client_host, operation, resource_type, name
        )

    def authorized_operations(
        self, resource_type: ResourceType, name: str = CLUSTER_NAME, requested: bool = True
    ) -> int:
        """The authorized-operations bitfield of a resource (Metadata, DescribeGroups,
        DescribeCluster), or the "not requested" value."""
        if not requested:
            return NOT_REQUESTED
        bits = 0
        for operation in OPERATIONS[resource_type]:
            if self.authorized(operation, resource_type, name):
                bits |= 1 << operation
        return bits


R = TypeVar("R")
S = TypeVar("S", bound=Response)


class Later:
    """A response promised but not ready: a Produce waiting for the ISR, a Fetch long poll.

    A handler returns one after doing everything its request changes (the appends) and
    registering what its answer waits for, a `Delayed` in a purgatory. The network layer
    goes on reading and handling the connection's next requests; its writer is woken when
    the answer at the head of its queue is done, and only then (Kafka's two-phase delayed
    operation), and sends it in its place in the order, built then by `finish`. So a
    producer pipelining acks=all requests waits for replication once, not once per request.
    """

    __slots__ = ("delayed", "respond")

    def __init__(self, delayed: Delayed[Any], respond: Callable[[Any], Response | None]) -> None:
        self.delayed = delayed
        self.respond = respond

    def finish(self) -> Response | None:
        return self.respond(self.delayed.finish())


def answer_when_done(delayed: Delayed[R], respond: Callable[[R], S]) -> S | Later:
    """The response at once if `delayed` is done already, else a `Later` for it."""
    if delayed.done:
        return respond(delayed.finish())
    return Later(delayed, respond)


Answer = Response | Later | None
HandlerFn = Callable[[RequestContext, Any, int], Awaitable[Answer]]
F = TypeVar("F", bound=Callable[..., Awaitable[Answer]])


@attrs.frozen
class Registration:
    api_key: int
    versions: Versions
    handler: HandlerFn

    @property
    def name(self) -> str:
        return api_name(self.api_key)


_REGISTRY: dict[int, Registration] = {}


def handles(api_key: ApiKey | int, versions: str) -> Callable[[F], F]:
    """Register the decorated coroutine as the handler of `api_key` at `versions` ("lo-hi")."""
    key = int(api_key)
    wanted = Versions.parse(versions)
    request = REQUESTS.get(key)
    if request is None:
        raise ValueError(f"gregor-protocol has no schema for API key {key}")
    known = request.valid_versions
    if not wanted or wanted.lo < known.lo or wanted.hi > known.hi:
        raise ValueError(f"{api_name(key)} versions {wanted} are not within the schema's {known}")

    def register(fn: F) -> F:
        existing = _REGISTRY.get(key)
        if existing is not None and existing.handler is not fn:
            raise ValueError(
                f"{api_name(key)} already has a handler: {existing.handler.__qualname__}"
            )
        _REGISTRY[key] = Registration(key, wanted, fn)
        return fn

    return register


def registration(api_key: int, api_version: int) -> Registration | None:
    """The handler of this API at this version, or None when we do not implement it."""
    found = _REGISTRY.get(api_key)
    if found is None or api_version not in found.versions:
        return None
    return found


def registrations() -> list[Registration]:
    return sorted(_REGISTRY.values(), key=lambda r: r.api_key)


def supported_api_versions() -> list[ApiVersion]:
    """The ApiVersions table: exactly what the registered handlers implement."""
    return [ApiVersion(r.api_key, r.versions.lo, r.versions.hi) for r in registrations()]


def api_versions_own_range() -> ApiVersion:
    """Our ApiVersions range alone: the body of the answer to an unsupported version."""
    found = _REGISTRY.get(ApiKey.API_VERSIONS)
    if found is None:
        return ApiVersion(ApiKey.API_VERSIONS, 0, 0)
    return ApiVersion(ApiKey.API_VERSIONS, found.versions.lo, found.versions.hi)


_loaded = False


def load_handlers() -> None:
    """Import every module of `gregor.broker.handlers`, registering their handlers."""
    global _loaded
    if _loaded:
        return
    package = importlib.import_module("gregor.broker.handlers")
    for module in pkgutil.iter_modules(package.__path__):
        if not module.name.startswith("_"):
            importlib.import_module(f"{package.__name__}.{module.name}")
    _loaded = True
