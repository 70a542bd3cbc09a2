"""The optional C accelerator of the producer's per-record path (Accumulator.append).

Everything else about the distribution is in pyproject.toml. The extension is optional:
without a compiler the build goes on with a warning, and accumulator.py uses its
pure-Python path. It compiles against gregor-protocol's header (a build requirement, found
with `gregor.protocol.get_include()`) and calls that package's extension through a capsule
at run time.
"""

from setuptools import setup

from gregor.protocol import get_include
from gregor.protocol.building import BuildExt, OptionalExtension

setup(
    cmdclass={"build_ext": BuildExt},
    ext_modules=[
        OptionalExtension(
            "gregor.client.producer._accumulate",
            ["src/gregor/client/producer/_accumulate.c"],
            fallback="gregor-client's produce() (Accumulator.append, ProducerCore.append_record)",
            include_dirs=[get_include()],
        )
    ],
)
