"""The optional C accelerator of the producer's per-record path (Accumulator.append).

Everything else about the distribution is in pyproject.toml. The extension is optional:
without a compiler the build goes on, and accumulator.py uses its pure-Python path. It
builds against gregor-protocol's _produced_batch.h (the same monorepo) and calls that
package's extension through a capsule at run time.
"""

from pathlib import Path

from setuptools import Extension, setup

PROTOCOL_SOURCES = Path("..", "protocol", "src", "gregor", "protocol")

setup(
    ext_modules=[
        Extension(
            "gregor.client.producer._accumulate",
            ["src/gregor/client/producer/_accumulate.c"],
            include_dirs=[str(PROTOCOL_SOURCES)],
            depends=[str(PROTOCOL_SOURCES / "_produced_batch.h")],
            optional=True,
        )
    ]
)
