"""Each distribution with a C extension, built as a user builds it: the sdist alone, the
wheel from that sdist, installed in a fresh venv; its extension is there and in use. A
build without a compiler says which path will be slow, and so does the import."""

from __future__ import annotations

import json
import sys
import tarfile
import textwrap
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from gregor_testing.builds import Built, build, fresh_venv, run

pytestmark = pytest.mark.slow

# What each package's sdist must hold for its wheel to build (beside its sources).
SDIST_NEEDS = {
    "protocol": ["src/gregor/protocol/_produced_batch.h", "src/gregor/protocol/building.py"],
    "storage": [],
    "client": [],
}

# Run in the fresh venv: import every module of the package (which binds its C twins; the
# build helpers need setuptools, at build time only), then say which extensions are in use
# and from where, and what was logged.
PROBE = textwrap.dedent(
    """
    import importlib, io, json, logging, pkgutil, sys
    log = io.StringIO()
    logging.basicConfig(stream=log, level=logging.INFO)
    package = importlib.import_module(sys.argv[1])
    for module in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
        if not module.name.endswith(("__main__", ".building")):
            importlib.import_module(module.name)
    from gregor.protocol.native import native_available
    print(json.dumps({
        "available": {name: native_available(name) for name in sys.argv[2:]},
        "files": {name: importlib.import_module(name).__file__ for name in sys.argv[2:]
                  if native_available(name)},
        "log": log.getvalue(),
    }))
    """
)


# Run in the client's venv: gzip needs no extra, lz4 does (ConfigError, naming it).
CODEC_CHECK = textwrap.dedent(
    """
    from gregor.client.config import ConfigError, ProducerConfig
    ProducerConfig.from_dict({"bootstrap.servers": "h:1", "compression.type": "gzip"})
    try:
        ProducerConfig.from_dict({"bootstrap.servers": "h:1", "compression.type": "lz4"})
    except ConfigError as exc:
        print(exc)
    """
)


def extensions(wheel: Path) -> list[str]:
    """The module names of the C extensions in a wheel."""
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    return [n.split(".")[0].replace("/", ".") for n in names if n.endswith(".so")]


def probe(python: Path, package: str, modules: list[str], cwd: Path) -> dict[str, object]:
    done = run(python, "-c", PROBE, f"gregor.{package}", *modules, cwd=cwd)
    result: dict[str, object] = json.loads(done.stdout)
    return result


@pytest.mark.parametrize("package", ["protocol", "storage", "client"])
def test_a_built_distribution_installs_alone_with_its_extension(
    package: str, distributions: Callable[[str], Built], tmp_path: Path
) -> None:
    built = distributions(package)
    with tarfile.open(built.sdist) as sdist:
        members = {name.split("/", 1)[1] for name in sdist.getnames() if "/" in name}
    assert {f"src/gregor/{package}/py.typed", *SDIST_NEEDS[package]} <= members
    assert [m for m in members if m.endswith(".c")], "the sdist lacks its C sources"
    assert not [m for m in members if ".." in m or m.startswith("/")]
    modules = extensions(built.wheel)
    assert any(m.startswith(f"gregor.{package}.") for m in modules), modules
    with zipfile.ZipFile(built.wheel) as wheel:
        assert not [n for n in wheel.namelist() if n.endswith(".c")]
        if package == "protocol":
            assert "gregor/protocol/_produced_batch.h" in wheel.namelist()

    venv = tmp_path / "venv"
    python = fresh_venv(venv, built.wheel, links=built.wheel.parent)
    # Every extension in use: the package's own and gregor-protocol's, which it calls.
    wanted = sorted({*modules, "gregor.protocol._records_speedups"})
    found = probe(python, package, wanted, cwd=tmp_path)
    assert found["available"] == dict.fromkeys(wanted, True), found["log"]
    files = found["files"]
    assert isinstance(files, dict)
    assert all(Path(f).is_relative_to(venv) for f in files.values()), files

    if package == "client":
        # The codecs beyond gzip are extras; asking for one that is missing names it.
        pip_list = run(sys.executable, "-m", "pip", "--python", python, "list", "--format=json")
        listed = json.loads(pip_list.stdout)
        names = {p["name"].lower() for p in listed}
        assert not names & {"lz4", "zstandard", "python-snappy", "cramjam"}, names
        check = run(python, "-c", CODEC_CHECK, cwd=tmp_path)
        assert "gregor-client[lz4]" in check.stdout, check.stdout


def test_a_build_without_a_compiler_warns_and_runs_in_pure_python(
    distributions: Callable[[str], Built], tmp_path: Path
) -> None:
    client = distributions("client")
    out = tmp_path / "dist"
    out.mkdir()
    protocol = distributions("protocol").wheel
    (out / protocol.name).symlink_to(protocol)
    with tarfile.open(client.sdist) as sdist:
        # Extraction filters came in Python 3.11.4 (Debian 12 has 3.11.2); this is our sdist.
        safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
        sdist.extractall(tmp_path, **safe)
    (source,) = tmp_path.glob("gregor_client-*/")
    printed = build(source, out, "--wheel", env={"CC": "/nonexistent/cc"})
    assert "WARNING: the C extension gregor.client.producer._accumulate was not built" in printed
    assert "gregor-client's produce()" in printed and "pure Python" in printed
    (wheel,) = out.glob("gregor_client-*.whl")
    assert extensions(wheel) == []

    python = fresh_venv(tmp_path / "venv", wheel, links=out)
    module = "gregor.client.producer._accumulate"
    found = probe(python, "client", [module, "gregor.protocol._records_speedups"], cwd=tmp_path)
    assert found["available"] == {module: False, "gregor.protocol._records_speedups": True}
    # The import says so too, once, naming the slower path.
    log = found["log"]
    assert isinstance(log, str)
    assert f"WARNING:gregor.protocol.native:{module} is not available" in log
    assert "slower pure-Python code" in log
