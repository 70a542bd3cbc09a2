"""Root conftest: the shared fixtures of tests/gregor_testing apply to every test suite.

The process and cluster fixtures need gregor-broker and the launcher (infra/devcluster); a
session that installs only some packages (`nox -s protocol`) runs without them.
"""

from importlib.util import find_spec

# Our own client decodes responses strictly in tests: bytes after a response's fields mean
# our encoder or tables are wrong (in production they are ignored, as Kafka does).
if find_spec("gregor.client"):
    from gregor.client.connection import BrokerConnection

    BrokerConnection.strict_responses = True

pytest_plugins = ["gregor_testing.builds", "gregor_testing.matrix"] + (
    ["gregor_testing.processes", "gregor_testing.cluster"]
    if find_spec("gregor.broker") and find_spec("gregor.devcluster")
    else []
)
