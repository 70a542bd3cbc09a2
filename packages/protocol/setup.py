"""The optional C accelerator of gregor.protocol.records.

Everything else about the distribution is in pyproject.toml. The extension is optional:
without a compiler the build goes on with a warning, and records.py uses its pure-Python
code. `_produced_batch.h` ships in the package (`gregor.protocol.get_include()`): the
storage and client extensions compile against it.
"""

import importlib.util
from pathlib import Path

from setuptools import setup

# This package's own build helpers, loaded from the source tree (it is not installed yet).
_spec = importlib.util.spec_from_file_location(
    "building", Path(__file__).parent / "src" / "gregor" / "protocol" / "building.py"
)
assert _spec is not None and _spec.loader is not None
building = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(building)

setup(
    cmdclass={"build_ext": building.BuildExt},
    ext_modules=[
        building.OptionalExtension(
            "gregor.protocol._records_speedups",
            ["src/gregor/protocol/_records_speedups.c"],
            fallback="gregor-protocol's record decoding, batch building and CRC-32C",
            depends=["src/gregor/protocol/_produced_batch.h"],
        )
    ],
)
