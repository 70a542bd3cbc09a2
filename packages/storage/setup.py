"""The optional C accelerator of gregor.storage's append fast path.

Everything else about the distribution is in pyproject.toml. The extension is optional:
without a compiler the build goes on, and fast_append.py uses its pure-Python path. It
builds against gregor-protocol's _produced_batch.h (the same monorepo) and calls that
package's extension through a capsule at run time.
"""

from pathlib import Path

from setuptools import Extension, setup

PROTOCOL_SOURCES = Path("..", "protocol", "src", "gregor", "protocol")

setup(
    ext_modules=[
        Extension(
            "gregor.storage._fast_append",
            ["src/gregor/storage/_fast_append.c"],
            include_dirs=[str(PROTOCOL_SOURCES)],
            depends=[str(PROTOCOL_SOURCES / "_produced_batch.h")],
            optional=True,
        )
    ]
)
