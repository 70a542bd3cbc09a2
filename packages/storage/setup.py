"""The optional C accelerator of gregor.storage's append fast path.

Everything else about the distribution is in pyproject.toml. The extension is optional:
without a compiler the build goes on with a warning, and fast_append.py uses its
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
            "gregor.storage._fast_append",
            ["src/gregor/storage/_fast_append.c"],
            fallback="gregor-storage's append fast path",
            include_dirs=[get_include()],
        )
    ],
)
