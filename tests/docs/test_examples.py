"""Every example in README.md and the package READMEs runs, against a real cluster.

The fenced `python` and `sh` blocks of each README run in order (a block whose info string
says `no-test` is left out), with the test cluster's bootstrap servers in place of
127.0.0.1:9092. Python blocks run twice, as a user trying them again would. An HTML comment
just before a block says what its output must contain (`<!-- example: expect "a" "b" -->`)
or that it runs until Ctrl-C, sent once it printed something
(`<!-- example: interrupt after "a" -->`). The cluster runs with the sample
infra/config/server.properties' settings (all but the per-broker ones), so those are proven
on real brokers too.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import threading
from pathlib import Path

import attrs
import pytest

from gregor.broker.properties import load_properties
from gregor.client import Producer
from gregor.devcluster import LocalCluster
from gregor_testing.cluster import cluster_fixture, create_topic

ROOT = Path(__file__).parents[2]
READMES = [
    "README.md",
    *sorted(str(p.relative_to(ROOT)) for p in ROOT.glob("packages/*/README.md")),
]
README_BOOTSTRAP = "127.0.0.1:9092"
TIMEOUT = 120.0
# Spark's examples: its workers are this interpreter, and it listens on loopback only.
EXAMPLE_ENV = {
    "PYTHONUNBUFFERED": "1",
    "PYSPARK_PYTHON": sys.executable,
    "PYSPARK_DRIVER_PYTHON": sys.executable,
    "SPARK_LOCAL_IP": "127.0.0.1",
    "PYSPARK_SUBMIT_ARGS": "--conf spark.ui.enabled=false --conf spark.driver.host=127.0.0.1"
    " --conf spark.driver.bindAddress=127.0.0.1 pyspark-shell",
}
PER_BROKER = {"broker.id", "listeners", "advertised.listeners", "zookeeper.connect", "log.dirs"}

_SAMPLE = load_properties(ROOT / "infra" / "config" / "server.properties")
examples_cluster = cluster_fixture(
    "examples_cluster", "module", {k: v for k, v in _SAMPLE.items() if k not in PER_BROKER}
)

_BLOCK = re.compile(
    r"(?:<!-- example: (?P<note>.*?) -->\n)?^```(?P<lang>\w+)(?P<info>[^\n]*)\n(?P<code>.*?)^```",
    re.MULTILINE | re.DOTALL,
)


@attrs.frozen
class Example:
    line: int
    lang: str
    code: str
    expect: tuple[str, ...]
    interrupt_after: str | None


def examples(readme: str) -> list[Example]:
    text = (ROOT / readme).read_text()
    found = []
    for match in _BLOCK.finditer(text):
        if match["lang"] not in ("python", "sh") or "no-test" in match["info"]:
            continue
        note = match["note"] or ""
        quoted = tuple(re.findall(r'"([^"]*)"', note))
        interrupt = note.startswith("interrupt after")
        found.append(
            Example(
                line=text.count("\n", 0, match.start("code")),
                lang=match["lang"],
                code=match["code"],
                expect=() if interrupt else quoted,
                interrupt_after=quoted[0] if interrupt else None,
            )
        )
    return found


def _command(example: Example, path: Path) -> list[str]:
    path.write_text(example.code)
    if example.lang == "python":
        return [sys.executable, str(path)]
    return ["bash", "-euo", "pipefail", str(path)]


def _run(example: Example, code: str, workdir: Path) -> str:
    """Run one block to its end (or to Ctrl-C); return its output, having checked it."""
    what = f"the {example.lang} example at line {example.line}"
    env = {**os.environ, **EXAMPLE_ENV}
    ext = "py" if example.lang == "python" else "sh"
    command = _command(attrs.evolve(example, code=code), workdir / f"example.{ext}")
    if example.interrupt_after is None:
        done = subprocess.run(
            command, cwd=workdir, env=env, capture_output=True, text=True, timeout=TIMEOUT
        )
        out, err, status = done.stdout, done.stderr, done.returncode
    else:
        out, err, status = _interrupted(command, workdir, env, example.interrupt_after, what)
    assert status == 0, f"{what} failed ({status}):\n{out}\n{err}"
    assert "Traceback" not in err, f"{what} printed a traceback:\n{err}"
    for text in example.expect:
        assert text in out, f"{what} did not print {text!r}:\n{out}\n{err}"
    return out


def _interrupted(
    command: list[str], workdir: Path, env: dict[str, str], marker: str, what: str
) -> tuple[str, str, int]:
    """Run until the output shows `marker`, then send SIGINT (Ctrl-C) and wait for the end."""
    process = subprocess.Popen(
        command,
        cwd=workdir,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # Ctrl-C as in a terminal, also when this run itself ignores SIGINT (a background
        # job of a script), which the example's Python would otherwise inherit.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    lines: list[str] = []
    assert process.stdout is not None and process.stderr is not None
    errors: list[str] = []
    reader = threading.Thread(target=lambda: errors.extend(process.stderr or []), daemon=True)
    reader.start()
    try:
        for line in process.stdout:
            lines.append(line)
            if marker in line:
                process.send_signal(signal.SIGINT)
                break
        else:
            pytest.fail(f"{what} ended before printing {marker!r}:\n{''.join(lines)}")
        rest, _ = process.communicate(timeout=TIMEOUT)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    reader.join(TIMEOUT)
    return "".join(lines) + rest, "".join(errors), process.returncode


@pytest.fixture(scope="module")
def readme_cluster(examples_cluster: LocalCluster) -> LocalCluster:
    """The cluster with the topics the examples use: `demo`, which the main job creates, and
    `orders` with a record, which the client README creates (so its second-run path is
    what runs there) and the others read."""
    create_topic(examples_cluster, "demo", 3, 3)
    create_topic(examples_cluster, "orders", 3, 3)
    with Producer({"bootstrap.servers": examples_cluster.bootstrap_servers}) as producer:
        producer.produce("orders", b'{"id": 0}', key=b"customer-0")  # for readers of orders
    return examples_cluster


@pytest.mark.parametrize("readme", READMES)
def test_readme_examples_run(readme_cluster: LocalCluster, readme: str, tmp_path: Path) -> None:
    found = examples(readme)
    if not found:
        pytest.skip(f"{readme} has no examples")
    bootstrap = readme_cluster.bootstrap_servers
    for example in found:
        code = example.code.replace(README_BOOTSTRAP, bootstrap)
        _run(example, code, tmp_path)
        if example.lang == "python" and example.interrupt_after is None:
            _run(example, code, tmp_path)  # a second run works too


def test_examples_are_found() -> None:
    """The parser sees the examples the READMEs hold (a broken fence would hide them)."""
    client = examples("packages/client/README.md")
    assert [e.lang for e in client] == ["python"] * 5
    assert client[0].expect == ("produced at offset", "consumed")
    assert client[1].interrupt_after == "consumed"
    root = examples("README.md")
    assert [e.lang for e in root] == ["sh", "sh"]
    assert [shlex.split(e.code.splitlines()[0])[0] for e in root] == ["kcat", "gregor"]
    assert root[1].expect == ("demo",)
