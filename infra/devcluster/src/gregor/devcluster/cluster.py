"""A local cluster: a ZooKeeper (or a given `zookeeper.connect`) and N brokers, under one
directory."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from gregor.devcluster.broker import BrokerProcess
from gregor.devcluster.zookeeper import ZooKeeper


class LocalCluster:
    """`ports` fixes the brokers' ports (else free ones are chosen); broker ids are 0..N-1;
    `racks` gives broker i the `broker.rack` racks[i]."""

    def __init__(
        self,
        directory: Path,
        brokers: int = 3,
        *,
        ports: Sequence[int] | None = None,
        zookeeper_port: int | None = None,
        zookeeper_connect: str | None = None,
        properties: Mapping[str, str] | None = None,
        listeners: Mapping[str, str] | None = None,
        racks: Sequence[str] | None = None,
    ) -> None:
        if ports is not None and len(ports) != brokers:
            raise ValueError(f"{brokers} brokers need {brokers} ports, not {list(ports)}")
        if racks is not None and len(racks) != brokers:
            raise ValueError(f"{brokers} brokers need {brokers} racks, not {list(racks)}")
        self.directory = directory
        self.zookeeper: ZooKeeper | None = None
        if zookeeper_connect is None:
            self.zookeeper = ZooKeeper(directory / "zookeeper", zookeeper_port)
            zookeeper_connect = self.zookeeper.connect
        self.zookeeper_connect = zookeeper_connect
        # Internal topics cannot have more replicas than there are brokers.
        properties = {
            "offsets.topic.replication.factor": str(min(3, brokers)),
            **(properties or {}),
        }
        self.brokers = [
            BrokerProcess(
                i,
                directory / f"broker-{i}",
                zookeeper_connect,
                port=ports[i] if ports is not None else None,
                properties=(
                    properties if racks is None else {**properties, "broker.rack": racks[i]}
                ),
                listeners=listeners,
            )
            for i in range(brokers)
        ]

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(b.address for b in self.brokers)

    def bootstrap_servers_of(self, listener: str) -> str:
        """Every broker's host:port on one of the `listeners`."""
        return ",".join(b.address_of(listener) for b in self.brokers)

    def broker(self, broker_id: int) -> BrokerProcess:
        return self.brokers[broker_id]

    def start(self, timeout: float = 90.0) -> None:
        """Start ZooKeeper, then every broker at once; return when all answer."""
        try:
            if self.zookeeper is not None:
                self.zookeeper.start()
            for broker in self.brokers:
                broker.launch()
            for broker in self.brokers:
                broker.wait_ready(timeout)
        except BaseException:
            self.stop()
            raise

    def stop(self, timeout: float = 60.0) -> None:
        """Stop every broker gracefully (all at once), then ZooKeeper."""
        for broker in self.brokers:
            broker.terminate()
        for broker in self.brokers:
            broker.wait(timeout)
        if self.zookeeper is not None:
            self.zookeeper.stop()

    def kill(self) -> None:
        for broker in self.brokers:
            broker.kill()
        if self.zookeeper is not None:
            self.zookeeper.kill()

    def __enter__(self) -> LocalCluster:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
