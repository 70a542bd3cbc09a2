"""Ports for the processes tests start: distinct, bindable, and out of the kernel's way."""

from __future__ import annotations

import socket

from gregor.devcluster.ports import ephemeral_start, free_port


def test_free_ports_are_distinct_bindable_and_below_the_ephemeral_range() -> None:
    ports = [free_port() for _ in range(500)]
    assert len(set(ports)) == len(ports)
    assert all(1024 < port < ephemeral_start() for port in ports)
    for port in ports[:20]:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", port))  # nothing took it
