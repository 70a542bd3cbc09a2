"""One gregor-broker process with its own directory, `server.properties` and data, started
as an operator starts one: `gregor-broker server.properties`."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path

from gregor.devcluster.ports import LOOPBACK, free_port
from gregor.devcluster.supervisor import Supervised, wait_until
from gregor.devcluster.wire import api_versions
from gregor.storage.checkpoints import format_properties


def broker_command() -> list[str]:
    """`gregor-broker` from the running interpreter's environment (else `python -m`)."""
    script = Path(sys.executable).parent / "gregor-broker"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "gregor.broker"]


class BrokerProcess(Supervised):
    """`properties` are added to (and override) the generated ones. Besides its PLAINTEXT
    listener on `port` (what the launcher checks readiness on), a broker gets one listener
    per entry of `listeners` (name -> security protocol, e.g. {"EXTERNAL": "SASL_SSL"}), each
    on a free port of its own (`ports`); their TLS and SASL settings go in `properties`.
    `namespace` is the network namespace it runs in (a host of the two-datacenter
    topology), if any."""

    def __init__(
        self,
        broker_id: int,
        directory: Path,
        zookeeper_connect: str,
        port: int | None = None,
        host: str = LOOPBACK,
        properties: Mapping[str, str] | None = None,
        namespace: str | None = None,
        listeners: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(f"broker {broker_id}", directory / "broker.log", namespace)
        self.broker_id = broker_id
        self.directory = directory
        self.zookeeper_connect = zookeeper_connect
        self.host = host
        self.port = port or free_port(host)
        self.extra = dict(properties or {})
        self.protocols = {"PLAINTEXT": "PLAINTEXT", **(listeners or {})}
        self.ports = {
            name: self.port if name == "PLAINTEXT" else free_port(host) for name in self.protocols
        }

    def __repr__(self) -> str:
        return f"<BrokerProcess {self.broker_id} at {self.address}>"

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def data_dir(self) -> Path:
        return self.directory / "data"

    @property
    def config_path(self) -> Path:
        return self.directory / "server.properties"

    def properties(self) -> dict[str, str]:
        props = {
            "broker.id": str(self.broker_id),
            "listeners": ",".join(f"{n}://{self.host}:{p}" for n, p in self.ports.items()),
            "log.dirs": str(self.data_dir),
            "zookeeper.connect": self.zookeeper_connect,
            # Small clusters on one machine: fail over and notice lag quickly.
            "zookeeper.session.timeout.ms": "6000",
            "replica.lag.time.max.ms": "10000",
            "controlled.shutdown.retry.backoff.ms": "500",
        }
        if len(self.protocols) > 1:
            props["listener.security.protocol.map"] = ",".join(
                f"{name}:{protocol}" for name, protocol in self.protocols.items()
            )
        props.update(self.extra)
        return props

    def address_of(self, listener: str) -> str:
        """host:port of one of the broker's listeners."""
        return f"{self.host}:{self.ports[listener]}"

    def write_config(self) -> Path:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(format_properties(self.properties(), "written by devcluster"))
        return self.config_path

    def launch(self) -> None:
        """Start the process without waiting for it (see `wait_ready`)."""
        if self.is_running():
            return
        self.write_config()
        self.spawn(self.command([*broker_command(), str(self.config_path)]))

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Wait until the broker answers ApiVersions; raise with its log's tail if it died."""
        try:
            wait_until(self._answers, timeout, f"broker {self.broker_id} on {self.address}")
        except (TimeoutError, RuntimeError) as exc:
            raise RuntimeError(f"{exc}; its log ends with:\n{self.log_tail()}") from exc

    def start(self, timeout: float = 60.0) -> None:
        self.launch()
        self.wait_ready(timeout)

    def _answers(self) -> bool:
        self.check_alive()
        return self.probe(api_versions, self.host, self.port, 1.0) is not None
