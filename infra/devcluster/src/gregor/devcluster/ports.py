"""Free TCP ports for local processes, chosen at run time."""

from __future__ import annotations

import random
import socket
import threading
from pathlib import Path

LOOPBACK = "127.0.0.1"

_handed_out: set[int] = set()
_lock = threading.Lock()


def ephemeral_start() -> int:
    """The first port of the kernel's ephemeral range (outgoing connections' ports)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port(host: str = LOOPBACK) -> int:
    """A TCP port nothing listens on right now, never the same twice in this process.

    It is drawn below the kernel's ephemeral range: the kernel's own choice (bind to port 0)
    can come back twice in a row, and a port from that range can be taken by any outgoing
    connection between now and the moment its server binds it.
    """
    high = max(ephemeral_start() - 1, 11_000)
    with _lock:
        while True:
            port = random.randint(10_000, high)
            if port in _handed_out:
                continue
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                try:
                    s.bind((host, port))
                except OSError:
                    continue
            _handed_out.add(port)
            return port
