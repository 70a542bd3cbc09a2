"""The optional C accelerator of gregor.protocol.records.

Everything else about the distribution is in pyproject.toml. The extension is optional:
without a compiler the build goes on, and records.py uses its pure-Python decoder.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "gregor.protocol._records_speedups",
            ["src/gregor/protocol/_records_speedups.c"],
            depends=["src/gregor/protocol/_produced_batch.h"],
            optional=True,
        )
    ]
)
