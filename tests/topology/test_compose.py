"""infra/compose, the deployment for people who run Docker: generated from the description,
so it cannot rot; valid under the Compose specification's JSON schema; and saying what the
description says (hosts, addresses, ports, configs, volumes)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from gregor.devcluster.compose import generate
from gregor.devcluster.topology import load
from gregor_testing.topology import DESCRIPTION

COMPOSE = DESCRIPTION.parent / "compose"


@pytest.fixture(scope="module")
def project() -> dict[str, Any]:
    data = yaml.safe_load((COMPOSE / "docker-compose.yml").read_text())
    assert isinstance(data, dict)
    return data


def test_the_committed_files_are_what_the_description_generates() -> None:
    expected = generate(load(DESCRIPTION))
    for path, content in expected.items():
        assert (COMPOSE / path).read_text() == content, (
            f"infra/compose/{path} is stale: run `python -m gregor.devcluster.compose`"
        )
    committed = {str(p.relative_to(COMPOSE)) for p in (COMPOSE / "config").rglob("*.*")}
    assert committed == {p for p in expected if p.startswith("config/")}


def compose_schema() -> dict[str, Any]:
    """The Compose specification's schema as docker-compose 1.29.2 (on PyPI, Apache-2.0)
    ships it; the tests session installs that distribution, without its dependencies, for
    this file alone."""
    spec = importlib.util.find_spec("compose")
    assert spec is not None and spec.origin is not None, "pip install --no-deps docker-compose"
    schema = json.loads((Path(spec.origin).parent / "config" / "compose_spec.json").read_text())
    assert isinstance(schema, dict)
    return schema


def test_the_compose_file_is_valid_under_the_compose_specification(
    project: dict[str, Any],
) -> None:
    schema = compose_schema()
    errors = [
        f"{'/'.join(map(str, e.path))}: {e.message}"
        for e in jsonschema.Draft201909Validator(schema).iter_errors(project)
    ]
    assert errors == []
    broken = dict(project, services={"dc1-zk1": {"networks": {"dc1": {"ipv4_address": 7}}}})
    assert not jsonschema.Draft201909Validator(schema).is_valid(broken)  # the schema bites


def test_the_compose_file_says_what_the_description_says(project: dict[str, Any]) -> None:
    topology = load(DESCRIPTION)
    services = project["services"]
    assert set(services) == set(topology.hosts)
    for name, host in topology.hosts.items():
        service = services[name]
        assert service["hostname"] == name
        own = service["networks"][host.datacenter]
        assert own == {"ipv4_address": str(host.address)}
        assert (COMPOSE.parents[1] / service["build"]["dockerfile"]).exists()
        if host.service in ("zookeeper", "broker"):
            assert service["volumes"] == [f"{name}:/var/lib/gregor"]
            assert name in project["volumes"]
        if host.service == "broker":
            config = (COMPOSE / project["configs"][name]["file"]).read_text()
            assert f"broker.id={host.id}" in config.splitlines()
            assert f"broker.rack={host.rack}" in config.splitlines()
            assert f"advertised.listeners=PLAINTEXT\\://{name}\\:9092" in config.splitlines()
            assert service["configs"] == [
                {"source": name, "target": "/etc/gregor/server.properties"}
            ]
        if host.service == "zookeeper":
            config = (COMPOSE / project["configs"][name]["file"]).read_text().splitlines()
            assert "clientPort=2181" in config
            members = topology.hosts_of(host.datacenter, "zookeeper")
            servers = [line for line in config if line.startswith("server.")]
            assert len(servers) == (len(members) if len(members) > 1 else 0)
        if host.service == "mirror":
            assert set(service["networks"]) == {host.datacenter, host.source}
            assert service["command"][-2:] == ["--clusters", host.datacenter]
        if host.service == "etl":  # gregor-etl as a service on its datacenter's cluster
            command = service["command"]
            assert command[0] == "gregor-etl" and "--every" in command
            bootstrap = command[command.index("--bootstrap-servers") + 1]
            assert bootstrap == topology.bootstrap_servers(host.datacenter)
            assert command[command.index("--warehouse") + 1] == "/var/lib/gregor/warehouse"
            assert service["volumes"] == [f"{name}:/var/lib/gregor"]
    for name, dc in topology.datacenters.items():
        (ipam,) = project["networks"][name]["ipam"]["config"]
        assert ipam == {"subnet": str(dc.subnet), "gateway": str(dc.gateway)}
