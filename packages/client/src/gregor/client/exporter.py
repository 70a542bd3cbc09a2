"""Serving a program's metrics to Prometheus, for the programs built on gregor-client
(gregor-mirror, gregor-etl): their `http://HOST:PORT` listener setting, and
prometheus_client's HTTP server, in a thread of its own, for as long as a `with` block runs.

Each program brings its own collector (what it measures and under which names); the
figures are read when scraped, so the measured paths do no more work for it.
prometheus_client is the `prometheus` extra of gregor-client, imported only here.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from prometheus_client.registry import Collector


def parse_listener(value: str) -> tuple[str, int]:
    """(host, port) of `http://HOST:PORT` (port 0: any free one); ValueError otherwise."""
    url = urlsplit(value.strip())
    try:
        port = url.port
    except ValueError:
        port = None
    if url.scheme != "http" or not url.hostname or port is None or url.path not in ("", "/"):
        raise ValueError("must be http://HOST:PORT, e.g. http://0.0.0.0:9108")
    return url.hostname, port


@contextmanager
def serving(listener: tuple[str, int], *collectors: Collector) -> Iterator[tuple[str, int]]:
    """Serve the collectors' metrics on /metrics at `listener` while the block runs; yields
    the address bound. OSError if it cannot be bound."""
    from prometheus_client import CollectorRegistry, start_http_server

    registry = CollectorRegistry(auto_describe=False)
    for collector in collectors:
        registry.register(collector)
    host, port = listener
    server, thread = start_http_server(port, host, registry)
    try:
        yield str(server.server_address[0]), server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
