"""Real processes for local clusters and tests: ZooKeeper now, brokers as they arrive.

Used by `nox -s cluster` (the README's main job) and by the test fixtures, so a test cluster
is started exactly the way an operator starts a local one. Everything listens on 127.0.0.1
and on ports chosen at run time unless told otherwise.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

ZOOKEEPER_JAR = Path(os.environ.get("GREGOR_ZOOKEEPER_JAR", "/usr/share/java/zookeeper.jar"))
LOOPBACK = "127.0.0.1"


def free_port(host: str = LOOPBACK) -> int:
    """A TCP port nothing listens on right now (the kernel's choice)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def wait_until(
    predicate: Callable[[], bool], timeout: float, what: str, interval: float = 0.05
) -> None:
    """Poll `predicate()` until it is true; raise TimeoutError naming `what` otherwise."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


def four_letter_word(host: str, port: int, word: str, timeout: float = 1.0) -> str:
    """Send a ZooKeeper four-letter command ("ruok", "srvr", ...) and return the answer."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.sendall(word.encode())
            s.shutdown(socket.SHUT_WR)
            chunks = []
            while chunk := s.recv(4096):
                chunks.append(chunk)
            return b"".join(chunks).decode(errors="replace")
    except OSError:
        return ""


class ZooKeeper:
    """A standalone ZooKeeper server (Debian's `zookeeper` package) in a directory of its own.

    The tick is short (500 ms) so that session-expiry tests do not wait long; sessions may
    still be negotiated up to 60 s.
    """

    def __init__(self, directory: Path, port: int | None = None, host: str = LOOPBACK) -> None:
        self.directory = directory
        self.host = host
        self.port = port or free_port(host)
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def connect(self) -> str:
        """The `zookeeper.connect` string for this server."""
        return f"{self.host}:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.directory / "zookeeper.log"

    def start(self, timeout: float = 60.0) -> None:
        java = shutil.which("java")
        if java is None or not ZOOKEEPER_JAR.exists():
            raise RuntimeError(
                f"ZooKeeper needs java and {ZOOKEEPER_JAR}; run infra/setup.sh to install them"
            )
        data = self.directory / "data"
        data.mkdir(parents=True, exist_ok=True)
        config = self.directory / "zoo.cfg"
        config.write_text(
            "\n".join(
                [
                    "tickTime=500",
                    f"dataDir={data}",
                    f"clientPort={self.port}",
                    f"clientPortAddress={self.host}",
                    "minSessionTimeout=1000",
                    "maxSessionTimeout=60000",
                    "admin.enableServer=false",
                    "4lw.commands.whitelist=ruok,srvr,mntr,cons",
                    "maxClientCnxns=0",
                    "",
                ]
            )
        )
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [
                    java,
                    "-Xmx256m",
                    "-XX:+UseSerialGC",
                    "-XX:TieredStopAtLevel=1",  # starts faster; ZooKeeper's load here is tiny
                    "-Dzookeeper.jmx.log4j.disable=true",
                    "-cp",
                    str(ZOOKEEPER_JAR),
                    "org.apache.zookeeper.server.quorum.QuorumPeerMain",
                    str(config),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # a Ctrl-C in the terminal is for the launcher alone
            )
        try:
            wait_until(self._ready, timeout, f"ZooKeeper on {self.connect}")
        except TimeoutError as exc:
            self.stop()
            tail = self.log_path.read_text(errors="replace")[-2000:]
            raise RuntimeError(f"{exc}; its log ends with:\n{tail}") from exc

    def _ready(self) -> bool:
        if self.process is not None and self.process.poll() is not None:
            raise RuntimeError(f"ZooKeeper exited with status {self.process.returncode}")
        return four_letter_word(self.host, self.port, "ruok") == "imok"

    def is_running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self, timeout: float = 15.0) -> None:
        """Stop gracefully (SIGTERM), then SIGKILL if it does not exit in time."""
        process = self.process
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def kill(self) -> None:
        """SIGKILL: the server vanishes, as in a crash."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()
