"""Root conftest: the shared fixtures of tests/gregor_testing apply to every test suite."""

pytest_plugins = ["gregor_testing.processes", "gregor_testing.cluster"]
