"""What the builds of Gregor's optional C extensions share: the setup.py of gregor-protocol,
gregor-storage and gregor-client build theirs with `OptionalExtension` and `BuildExt`.

An extension that does not compile (no compiler, no Python headers) leaves the install
working on the package's pure-Python reference, with a warning in the build's output that
says so; at run time `gregor.protocol.native` logs it again. Only the builds import this
module (setuptools is a build requirement, not a run-time one).
"""

from __future__ import annotations

import sys
from typing import Any

from setuptools import Extension
from setuptools.command.build_ext import build_ext
from setuptools.errors import BaseError, CCompilerError


class OptionalExtension(Extension):
    """A C twin of `fallback`, the pure-Python code its package uses when it is not built."""

    def __init__(self, name: str, sources: list[str], fallback: str, **kwargs: Any) -> None:
        super().__init__(name, sources, optional=True, **kwargs)
        self.fallback = fallback


class BuildExt(build_ext):
    """build_ext that skips an OptionalExtension it cannot build, naming the slow path."""

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except (CCompilerError, BaseError) as exc:
            if not isinstance(ext, OptionalExtension):
                raise
            print(
                f"\nWARNING: the C extension {ext.name} was not built ({exc}).\n"
                f"WARNING: {ext.fallback} will run in pure Python instead, several times "
                "slower. Install a C compiler and the Python headers (Debian: apt install "
                "gcc python3-dev) and build again to get it.\n",
                file=sys.stderr,
                flush=True,
            )
