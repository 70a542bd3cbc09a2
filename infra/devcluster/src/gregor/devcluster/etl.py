"""A topology's ETL host as a process: `gregor-etl --every SECONDS` (gregor-spark) loading
the topics of its datacenter's cluster into a Parquet warehouse in its folder
(`<folder>/<host>/warehouse`), exactly once, on a local Spark: a JVM with its Python
workers, all inside the host's namespace.

The driver is the process devcluster starts; Spark's JVM and Python workers are its
children, in its process group. A crash (`kill`) and a pause take the whole group, as a
machine that dies or freezes would; `terminate` asks the driver alone to stop (it stops its
queries, then Spark).
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any

from gregor.devcluster.supervisor import Supervised
from gregor.devcluster.topology import Host, Topology

SPARK_MASTER = "local[2]"
# What users write: not the mirrors' internal topics, nor MM2's heartbeats (theirs or copies).
# (\Z, not $: Compose would read `$` as the start of a variable.)
DEFAULT_PATTERN = r"(?!.*\.internal\Z|(.*\.)?heartbeats\Z).*"
DEFAULT_EVERY = 5.0  # seconds between micro-batches


def etl_arguments(
    topology: Topology,
    host: Host,
    warehouse: Path,
    pattern: str = DEFAULT_PATTERN,
    every: float = DEFAULT_EVERY,
    batch: int | None = None,
) -> list[str]:
    """gregor-etl's arguments on an ETL host (here and in the compose project): topics of
    its datacenter's cluster matching `pattern` (whole names) into `warehouse`, a
    micro-batch every `every` seconds of at most `batch` records."""
    return [
        "--bootstrap-servers", topology.bootstrap_servers(host.datacenter),
        "--pattern", pattern, "--warehouse", str(warehouse),
        "--master", SPARK_MASTER, "--every", str(every),
        *(["--max-records-per-batch", str(batch)] if batch else []),
    ]  # fmt: skip


def etl_command() -> list[str]:
    """`gregor-etl` from the running interpreter's environment (else `python -m`)."""
    script = Path(sys.executable).parent / "gregor-etl"
    return [str(script)] if script.exists() else [sys.executable, "-m", "gregor.spark.etl"]


class EtlProcess(Supervised):
    """The ETL host's gregor-etl as a service, with its warehouse and log in `directory`
    (`options`: those of etl_arguments)."""

    def __init__(
        self,
        topology: Topology,
        host: Host,
        directory: Path,
        namespace: str | None = None,
        **options: Any,
    ) -> None:
        super().__init__(f"etl {host.name}", directory / "etl.log", namespace)
        self.host = host
        self.warehouse = directory / "warehouse"
        self.argv = etl_arguments(topology, host, self.warehouse, **options)

    def launch(self) -> None:
        """Start the service without waiting for it: it loads once its queries run."""
        if self.is_running():
            return
        # Spark's workers are this interpreter (with gregor-spark); its own sockets (driver,
        # workers) stay on the host's loopback, its scratch space in the host's folder.
        env = [
            "env", f"PYSPARK_PYTHON={sys.executable}", "SPARK_LOCAL_IP=127.0.0.1",
            f"SPARK_LOCAL_DIRS={self.log_path.parent / 'spark'}",
        ]  # fmt: skip
        self.spawn(self.command([*env, *etl_command(), *self.argv]))

    def wait_ready(self, timeout: float = 0.0) -> None:
        self.check_alive()

    def _signal_group(self, signum: int) -> None:
        if self.is_running():
            assert self.process is not None
            os.killpg(self.process.pid, signum)  # a session of its own: its group is its pid

    def kill(self) -> None:
        """SIGKILL to the driver, its JVM and its Python workers at once."""
        if self.is_running():
            self._signal_group(signal.SIGKILL)
            assert self.process is not None
            self.process.wait()

    def pause(self) -> None:
        self._signal_group(signal.SIGSTOP)

    def resume(self) -> None:
        self._signal_group(signal.SIGCONT)
