"""gregor-mirror as a process of its own, for tests that stop and kill it."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path


class MirrorProcess:
    """`gregor-mirror mm2.properties --clusters ...` as a process of its own."""

    def __init__(self, path: Path, clusters: list[str], log: Path) -> None:
        self.path = path
        self.clusters = clusters
        self.log_path = log
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> MirrorProcess:
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "gregor.mirror",
                    str(self.path),
                    "--clusters",
                    *self.clusters,
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        return self

    def stop(self, timeout: float = 60.0) -> int | None:
        """SIGTERM: a clean stop (what is in flight is delivered and synced)."""
        if self.process is None or self.process.poll() is not None:
            return None if self.process is None else self.process.returncode
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(30)

    def log_tail(self, size: int = 6000) -> str:
        return self.log_path.read_text(errors="replace")[-size:]
