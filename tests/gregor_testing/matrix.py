"""The five-client compatibility matrix: which real client does what against Gregor.

A test is a cell of the matrix when it is marked `@pytest.mark.interop(client, column)`
(several marks: several cells); a cell's outcome is its tests' together: FAIL if any failed,
else XFAIL if any is an expected failure, else PASS if any passed, else N/A (every one
skipped, the reason shown). Cells live beside the per-client tests they are (tests/broker,
tests/groups) and in tests/interop for what no other suite covers, so nothing runs twice.

`pytest --matrix=PATH` (the nox session `interop` gives it with `-m interop`) prints the
table at the end of the run and writes it, with each client's version, to PATH as Markdown.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

import pytest

# Rows, in the table's order: (key used in marks, the name shown).
CLIENTS = {
    "confluent": "confluent-kafka",
    "kcat": "kcat (Debian librdkafka)",
    "kcat-new": "kcat (current librdkafka)",
    "kafka-python": "kafka-python",
    "aiokafka": "aiokafka",
    "kafkajs": "KafkaJS",
}
COLUMNS = {
    "metadata": "metadata",
    "produce": "produce (every codec)",
    "fetch": "fetch",
    "admin": "admin",
    "groups": "groups",
    "static-coop": "static + cooperative",
    "idempotence": "idempotence",
    "transactions": "transactions",
}

INTEROP = Path(__file__).resolve().parents[1] / "interop"
NODE_MODULES = INTEROP / "node_modules"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--matrix",
        metavar="PATH",
        default=None,
        help="print the interop matrix at the end and write it to PATH (Markdown)",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "interop(client, column): a cell of the five-client matrix (tests/interop)"
    )
    config.stash[_RESULTS] = {}


_RESULTS = pytest.StashKey[dict[tuple[str, str], list[tuple[str, str]]]]()


def _cells(item: pytest.Item) -> Iterator[tuple[str, str]]:
    for mark in item.iter_markers("interop"):
        client, column = mark.args
        if client not in CLIENTS or column not in COLUMNS:
            raise pytest.UsageError(f"{item.nodeid}: no matrix cell ({client!r}, {column!r})")
        yield client, column


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    cells = list(_cells(item))
    if not cells:
        return
    result: tuple[str, str] | None = None
    if hasattr(report, "wasxfail"):
        result = ("XFAIL", str(report.wasxfail)) if report.skipped else ("FAIL", "XPASS(strict)")
    elif report.failed:
        result = ("FAIL", report.when)
    elif report.skipped and report.when in ("setup", "call"):
        longrepr = report.longrepr
        reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
        result = ("N/A", reason.removeprefix("Skipped: "))
    elif report.passed and report.when == "call":
        result = ("PASS", "")
    if result is not None:
        store = item.config.stash[_RESULTS]
        for cell in cells:
            store.setdefault(cell, []).append(result)


def cell_outcome(results: list[tuple[str, str]]) -> tuple[str, str]:
    """One cell's outcome from its tests' (see the module docstring)."""
    for status in ("FAIL", "XFAIL", "PASS"):
        found = [note for s, note in results if s == status]
        if found:
            return status, found[0]
    return "N/A", results[0][1] if results else "no test"


def client_versions() -> dict[str, str]:
    out: dict[str, str] = {}
    try:
        import confluent_kafka

        out["confluent"] = (
            f"confluent-kafka {confluent_kafka.__version__}, "
            f"librdkafka {confluent_kafka.libversion()[0]}"
        )
        out["kcat-new"] = f"kcat {_kcat_version(new=True)}"
    except ImportError:
        pass
    out["kcat"] = f"kcat {_kcat_version(new=False)}"
    for key, dist in (("kafka-python", "kafka-python"), ("aiokafka", "aiokafka")):
        try:
            out[key] = f"{dist} {metadata.version(dist)}"
        except metadata.PackageNotFoundError:
            out[key] = "not installed"
    package = NODE_MODULES / "kafkajs" / "package.json"
    if package.is_file():
        out["kafkajs"] = f"KafkaJS {json.loads(package.read_text())['version']}"
    return out


def _kcat_version(*, new: bool) -> str:
    if shutil.which("kcat") is None:
        return "not installed"
    env = kcat_env(new=new)
    if env is None:
        return "not available"
    done = subprocess.run(["kcat", "-V"], capture_output=True, env=env, check=False, timeout=10)
    text = done.stdout.decode(errors="replace")
    for line in text.splitlines():
        if line.startswith("Version"):
            # "Version 1.7.1 (JSON, ..., librdkafka 2.16.0 builtin.features=...)"
            kcat = line.split()[1]
            lib = line.split("librdkafka ")[1].split()[0] if "librdkafka " in line else "?"
            return f"{kcat}, librdkafka {lib}"
    return "unknown"


def kcat_env(*, new: bool) -> dict[str, str] | None:
    """The environment to run kcat with: Debian's librdkafka, or (new) the librdkafka that
    confluent-kafka bundles, loaded in its place (same ABI); None if there is none."""
    env = dict(os.environ)
    if not new:
        return env
    try:
        import confluent_kafka
    except ImportError:
        return None
    libs = Path(confluent_kafka.__file__).resolve().parent.parent / "confluent_kafka.libs"
    found = sorted(libs.glob("librdkafka*.so*"))
    if not found:
        return None
    shim = Path(os.environ.get("TMPDIR", "/tmp")) / f"gregor-librdkafka-{os.getuid()}"
    shim.mkdir(exist_ok=True)
    link = shim / "librdkafka.so.1"
    if not link.exists() or link.resolve() != found[0]:
        link.unlink(missing_ok=True)
        link.symlink_to(found[0])
    env["LD_LIBRARY_PATH"] = f"{shim}:{env.get('LD_LIBRARY_PATH', '')}".rstrip(":")
    return env


# What a user of a client should know, each held by a test (as Apache Kafka behaves too).
KNOWN_BEHAVIOURS = """
## Client behaviours to know

- **KafkaJS: a new consumer can read nothing for a whole session timeout (30 s by default)
  after one failed join.** An error while its consumer joins and syncs, other than a
  rebalance (for example COORDINATOR_NOT_AVAILABLE, the answer to a SyncGroup whose group
  write failed because `__consumer_offsets` was below `min.insync.replicas`), makes KafkaJS
  restart the consumer under a new member id without leaving the group. The group then
  waits for the old member until its session expires, as Apache Kafka's coordinator does.
  Gregor's coordinator logs the write that failed, the member it waits for (`waiting up to
  ... ms for 1 member(s) to rejoin: <id> (client ..., session timeout ... ms)`) and its
  removal. A shorter `sessionTimeout` shortens the wait
  (`tests/interop/test_kafkajs_restart.py`).
"""


def render(results: dict[tuple[str, str], list[tuple[str, str]]]) -> str:
    versions = client_versions()
    lines = [
        "| client | version | " + " | ".join(COLUMNS.values()) + " |",
        "|---|---|" + "---|" * len(COLUMNS),
    ]
    notes: list[str] = []
    for client, name in CLIENTS.items():
        row = [name, versions.get(client, "?")]
        for column in COLUMNS:
            status, note = (
                cell_outcome(results[(client, column)])
                if (client, column) in results
                else ("-", "not run")
            )
            row.append(status)
            if status in ("N/A", "XFAIL", "FAIL") and note:
                notes.append(f"- {name} / {COLUMNS[column]}: {status}: {note}")
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n\n" + "\n".join(dict.fromkeys(notes)) + "\n"


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, config: pytest.Config
) -> None:
    path = config.getoption("--matrix")
    if path is None:
        return
    table = render(config.stash[_RESULTS])
    terminalreporter.section("interop matrix")
    terminalreporter.write(table)
    Path(path).write_text(
        "# Compatibility\n\n"
        "Five real clients against a three-broker Gregor cluster, one cell per capability\n"
        "(`nox -s interop` writes this file; the cells are the tests marked\n"
        "`interop(client, column)`, see `tests/gregor_testing/matrix.py`).\n"
        "PASS: the cell's tests passed. N/A: the client cannot do it. XFAIL: Gregor cannot\n"
        "do it yet. FAIL: a bug. -: no test of the cell ran (none written yet, or deselected).\n\n"
        + table
        + KNOWN_BEHAVIOURS
    )


def run_kcat(bootstrap: str, *args: str, new: bool, stdin: bytes | None = None) -> bytes:
    """kcat's output for `args` against `bootstrap`, with Debian's or (new) the current
    librdkafka (see kcat_env); the test is skipped if there is no current one, and fails
    with kcat's stderr if kcat does."""
    env = kcat_env(new=new)
    if env is None:
        pytest.skip("no current librdkafka to run kcat with (confluent-kafka's)")
    done = subprocess.run(
        ["kcat", "-b", bootstrap, *args],
        input=stdin,
        capture_output=True,
        timeout=60,
        check=False,
        env=env,
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    return done.stdout
