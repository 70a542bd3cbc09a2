"""The pieces every subcommand shares: Java properties files, key=value arguments, partition
specs, the round-robin reassignment proposal, and one-line argument errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from gregor.client import TopicPartition
from gregor.tools import cli
from gregor.tools.common import ToolError, key_values, read_properties, topic_partitions
from gregor.tools.reassign import propose


def test_properties_file(tmp_path: Path) -> None:
    path = tmp_path / "client.properties"
    path.write_text(
        "# a comment\n! another\nsecurity.protocol=SASL_SSL\nsasl.mechanism : SCRAM-SHA-256\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\\n"
        '    username="alice" password="pw";\n\n'
    )
    assert read_properties(path) == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="alice" password="pw";',
    }
    path.write_text("no separator here\n")
    with pytest.raises(ToolError, match="not a key=value line"):
        read_properties(path)


def test_key_values_and_partitions() -> None:
    assert key_values(["a=1,b=[x,y]", "c = 3"], "--config") == {"a": "1", "b": "x,y", "c": "3"}
    with pytest.raises(ToolError, match="expected key=value"):
        key_values(["a"], "--config")
    assert topic_partitions("orders") == ("orders", None)
    assert topic_partitions("orders:0,2") == ("orders", [0, 2])


def test_propose_keeps_replication_factors() -> None:
    now = {
        TopicPartition("t", 0): [0, 1],
        TopicPartition("t", 1): [1, 2],
        TopicPartition("u", 0): [0],
    }
    assert propose(now, [3, 4, 5]) == {
        TopicPartition("t", 0): [3, 4],
        TopicPartition("t", 1): [4, 5],
        TopicPartition("u", 0): [5],
    }
    with pytest.raises(ToolError, match="2 replicas"):
        propose(now, [3])


def test_bad_arguments_are_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["topics", "describe"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--bootstrap-server" in err
    status = cli.main(["dump-log", "--files", "/nonexistent/00000000000000000000.log"])
    assert status == 1
    assert capsys.readouterr().err.startswith("gregor: error: cannot read /nonexistent/")
