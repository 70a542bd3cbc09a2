"""Gregor's distributions built as a user builds them, for the packaging tests.

`distributions(name)` (a session fixture) builds a package's sdist, then its wheel from that
sdist (`python -m build`, each in an isolated build environment), so a file the sdist
lacks fails the wheel's build. gregor-protocol is built first: the storage and client
builds get it, their build requirement, from the same folder (pip's find-links), as a
user building from a checkout does. `fresh_venv` makes an environment holding nothing but
what is installed into it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

import attrs
import pytest

ROOT = Path(__file__).resolve().parents[2]


def _environment() -> dict[str, str]:
    # The fresh installs are tested with their extensions, whatever this suite runs with.
    return {k: v for k, v in os.environ.items() if k != "GREGOR_NO_EXTENSIONS"}


def run(
    *args: str | Path, cwd: Path | None = None, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run a command to completion, or fail the test with all it printed."""
    done = subprocess.run(
        [str(a) for a in args],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=cwd,
        env={**_environment(), **(env or {})},
        check=False,
    )
    assert done.returncode == 0, f"{args}:\n{done.stdout}\n{done.stderr}"
    return done


def find_links(folder: Path) -> dict[str, str]:
    """The environment that adds `folder` to pip's find-links (keeping any already set)."""
    return {
        "PIP_FIND_LINKS": " ".join(filter(None, [os.environ.get("PIP_FIND_LINKS"), str(folder)]))
    }


@attrs.frozen
class Built:
    sdist: Path
    wheel: Path
    output: str  # what the build printed


def build(source: Path, out: Path, *args: str, env: Mapping[str, str] | None = None) -> str:
    """`python -m build <args>` of the source tree `source` into `out`, with gregor-protocol's
    wheel found in `out`; what it printed."""
    done = run(
        sys.executable, "-m", "build", *args, "--outdir", out, source,
        env={**find_links(out), **(env or {})},
    )  # fmt: skip
    return done.stdout + done.stderr


@pytest.fixture(scope="session")
def distributions(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Built]:
    """The sdist and wheel of a package (built on first use), all in one folder."""
    out = tmp_path_factory.mktemp("dist")
    built: dict[str, Built] = {}

    def get(package: str) -> Built:
        if package not in built:
            if package != "protocol":
                get("protocol")
            output = build(ROOT / "packages" / package, out)
            name = f"gregor_{package}-"
            (sdist,) = out.glob(f"{name}*.tar.gz")
            (wheel,) = out.glob(f"{name}*.whl")
            built[package] = Built(sdist, wheel, output)
        return built[package]

    return get


def fresh_venv(path: Path, *requirements: str | Path, links: Path) -> Path:
    """A new virtualenv at `path` with `requirements` installed (and what they need, from
    the package index or `links`); its python."""
    run(sys.executable, "-m", "venv", "--without-pip", path)
    python = path / "bin" / "python"
    run(sys.executable, "-m", "pip", "--python", python, "install", "-q", "--find-links", links,
        *requirements)  # fmt: skip
    return python
