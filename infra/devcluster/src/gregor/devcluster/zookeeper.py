"""A standalone ZooKeeper server (Debian's `zookeeper` package) in a directory of its own."""

from __future__ import annotations

import os
import shutil
import socket
from collections.abc import Mapping
from pathlib import Path

from gregor.devcluster.ports import LOOPBACK, free_port
from gregor.devcluster.supervisor import Supervised, wait_until

ZOOKEEPER_JAR = Path(os.environ.get("GREGOR_ZOOKEEPER_JAR", "/usr/share/java/zookeeper.jar"))


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


class ZooKeeper(Supervised):
    """The server's data, `zoo.cfg` and log live under `directory`.

    The tick is short (500 ms) so that session-expiry tests do not wait long; sessions may
    still be negotiated up to 60 s. Alone by default; a member of an ensemble when given
    its `server_id` (myid) and `ensemble`, every member's `server.N` address
    (`host:peerPort:electionPort`), N included.
    """

    def __init__(
        self,
        directory: Path,
        port: int | None = None,
        host: str = LOOPBACK,
        *,
        server_id: int | None = None,
        ensemble: Mapping[int, str] | None = None,
        namespace: str | None = None,
    ) -> None:
        super().__init__("ZooKeeper", directory / "zookeeper.log", namespace)
        self.directory = directory
        self.host = host
        self.port = port or free_port(host)
        self.server_id = server_id
        self.ensemble = dict(ensemble or {})
        if self.ensemble and server_id not in self.ensemble:
            raise ValueError(f"server {server_id} is not in the ensemble {self.ensemble}")

    @property
    def connect(self) -> str:
        """The `zookeeper.connect` string for this server."""
        return f"{self.host}:{self.port}"

    @property
    def data_dir(self) -> Path:
        return self.directory / "data"

    def settings(self) -> list[str]:
        """The lines of its `zoo.cfg`."""
        settings = [
            "tickTime=500",
            f"dataDir={self.data_dir}",
            f"clientPort={self.port}",
            f"clientPortAddress={self.host}",
            "minSessionTimeout=1000",
            "maxSessionTimeout=60000",
            "admin.enableServer=false",
            "4lw.commands.whitelist=ruok,srvr,mntr,cons",
            "maxClientCnxns=0",
        ]
        if self.ensemble:
            # A follower has 5 s to connect and sync with the leader, then 2.5 s per sync.
            settings += ["initLimit=10", "syncLimit=5"]
            settings += [f"server.{n}={address}" for n, address in sorted(self.ensemble.items())]
        return settings

    def write_config(self) -> Path:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if self.ensemble:
            (self.data_dir / "myid").write_text(f"{self.server_id}\n")
        config = self.directory / "zoo.cfg"
        config.write_text("\n".join(self.settings()) + "\n")
        return config

    def launch(self) -> None:
        """Start the server without waiting for it (see `wait_ready`): an ensemble's members
        are launched together, since none serves before a quorum has elected a leader."""
        java = shutil.which("java")
        if java is None or not ZOOKEEPER_JAR.exists():
            raise RuntimeError(
                f"ZooKeeper needs java and {ZOOKEEPER_JAR}; run infra/setup.sh to install them"
            )
        config = self.write_config()
        self.spawn(
            self.command(
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
                ]
            )
        )

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Return once the server serves clients; stop it and raise with its log if not."""
        try:
            wait_until(self._ready, timeout, f"ZooKeeper on {self.connect}")
        except (TimeoutError, RuntimeError) as exc:
            self.stop()
            raise RuntimeError(f"{exc}; its log ends with:\n{self.log_tail(2000)}") from exc

    def start(self, timeout: float = 60.0) -> None:
        """Start the server and return once it serves clients."""
        self.launch()
        self.wait_ready(timeout)

    def _ready(self) -> bool:
        self.check_alive()
        if not self.ensemble:
            return self.probe(four_letter_word, self.host, self.port, "ruok") == "imok"
        # A member answers `ruok` before it has joined a quorum; `srvr` tells its mode.
        answer = self.probe(four_letter_word, self.host, self.port, "srvr")
        return "Mode: leader" in answer or "Mode: follower" in answer

    def stop(self, timeout: float = 15.0) -> int | None:
        """Stop gracefully (SIGTERM), then SIGKILL if it does not exit in time."""
        return super().stop(timeout)
