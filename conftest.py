"""Root conftest: the shared fixtures of tests/gregor_testing apply to every test suite.

The process and cluster fixtures need gregor-broker and the launcher (infra/devcluster); a
session that installs only some packages (`nox -s protocol`) runs without them.
"""

from importlib.util import find_spec

pytest_plugins = ["gregor_testing.builds"] + (
    ["gregor_testing.processes", "gregor_testing.cluster"]
    if find_spec("gregor.broker") and find_spec("gregor.devcluster")
    else []
)
