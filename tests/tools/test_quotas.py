"""`gregor quotas` against a real cluster: quotas of a user, of a (user, client-id) pair and
of the default client id set, described as one table and as JSON, and removed; what
`gregor configs` shows of the same quotas."""

from __future__ import annotations

import uuid

from tools.helpers import fails, gregor, on

from gregor.devcluster import LocalCluster


def test_quotas_of_users_clients_and_pairs(tools_cluster: LocalCluster) -> None:
    user, client = f"u-{uuid.uuid4().hex[:8]}", f"c-{uuid.uuid4().hex[:8]}"
    pair = ("--user", user, "--client-id", client)
    on(tools_cluster, "quotas", "alter", "--user", user, "--add-config", "consumer_byte_rate=2048")
    done = on(
        tools_cluster, "quotas", "alter", *pair,
        "--add-config", "producer_byte_rate=1048576,request_percentage=12.5",
    )  # fmt: skip
    assert done == {
        "altered": {
            "entity": {"user": user, "client-id": client},
            "quotas": {"producer_byte_rate": 1048576.0, "request_percentage": 12.5},
        }
    }
    on(
        tools_cluster,
        "quotas",
        "alter",
        "--client-default",
        "--add-config",
        "producer_byte_rate=99",
    )

    # With only --user: the user's own quotas, then its pairs.
    assert on(tools_cluster, "quotas", "describe", "--user", user) == [
        {"entity": {"user": user}, "quotas": {"consumer_byte_rate": 2048.0}},
        {
            "entity": {"user": user, "client-id": client},
            "quotas": {"producer_byte_rate": 1048576.0, "request_percentage": 12.5},
        },
    ]
    assert on(tools_cluster, "quotas", "describe", "--client-default") == [
        {"entity": {"client-id": None}, "quotas": {"producer_byte_rate": 99.0}}
    ]
    table = gregor(
        "quotas", "describe", "--bootstrap-server", tools_cluster.bootstrap_servers
    ).stdout.splitlines()
    header = table[1].split()
    assert header[:5] == [
        "USER", "CLIENT-ID", "PRODUCER_BYTE_RATE", "CONSUMER_BYTE_RATE", "REQUEST_PERCENTAGE"
    ]  # fmt: skip
    rows = {tuple(line.split()[:2]): line.split()[2:5] for line in table[3:] if line.strip()}
    assert rows[(user, "-")] == ["-", "2048", "-"]
    assert rows[(user, client)] == ["1048576", "-", "12.5"]
    assert rows[("-", "<default>")] == ["99", "-", "-"]

    # kafka-configs' view: --entity-type users lists the user's own quotas only.
    [own] = on(
        tools_cluster, "configs", "describe", "--entity-type", "users", "--entity-name", user
    )
    assert own["configs"] == {"consumer_byte_rate": {"value": "2048.0"}}

    on(tools_cluster, "quotas", "alter", *pair,
       "--delete-config", "producer_byte_rate,request_percentage")  # fmt: skip
    on(tools_cluster, "quotas", "alter", "--user", user, "--delete-config", "consumer_byte_rate")
    on(
        tools_cluster,
        "quotas",
        "alter",
        "--client-default",
        "--delete-config",
        "producer_byte_rate",
    )
    assert on(tools_cluster, "quotas", "describe", "--user", user) == []
    assert "give --add-config or --delete-config" in fails(
        tools_cluster, "quotas", "alter", "--user", user
    )
    assert "--user" in fails(
        tools_cluster, "quotas", "alter", "--add-config", "producer_byte_rate=1"
    )
