"""Every way to build, test, benchmark and run Gregor.

`nox` with no arguments runs what CI runs: lint, typecheck, tests and unit_pure. Sessions
install the packages from this working tree (editable), so a fresh machine needs only
`infra/setup.sh`.
"""

from __future__ import annotations

import os
from pathlib import Path

import nox

nox.options.sessions = ["lint", "typecheck", "tests", "unit_pure"]
nox.options.reuse_existing_virtualenvs = True
nox.options.error_on_missing_interpreters = True

ROOT = Path(__file__).parent
# Install order follows the dependency direction: protocol <- storage, client <- broker.
PACKAGES = ["protocol", "storage", "client", "spark", "broker", "mirror", "tools"]
# The local-process launcher (ZooKeeper, gregor-broker processes): development infrastructure
# for the cluster session, the tests' fixtures and the benchmarks, never a dependency of a
# package. It needs gregor-protocol and gregor-storage installed first.
LAUNCHER = ["-e", str(ROOT / "infra" / "devcluster")]
# Real third-party clients and test tools; never imported by the packages themselves.
TEST_DEPS = [
    "pytest>=8",
    "pytest-timeout>=2.3",
    "pytest-trio>=0.8",
    "hypothesis>=6.100",
    "kafka-python>=3.0",  # its JSON-built message classes and kafka.protocol.old
    "aiokafka>=0.11",
    "confluent-kafka>=2.4",
    "kio>=0.6",
    "xxhash>=3",  # kafka-python needs it to write the old lz4 frames of magic 0
    "build>=1.2",  # PyPA's builder: the packaging tests build sdists and wheels as users do
    "pyyaml>=6",  # reads infra/compose/docker-compose.yml as Compose does
    "jsonschema>=4.18",  # validates it against the Compose specification's schema
    "trustme>=1.1",  # a CA and certificates made in the test, for the TLS tests
]
# The Compose specification's JSON schema, for tests/topology/test_compose.py: docker-compose
# 1.29.2 ships it (compose/config/compose_spec.json, Apache-2.0); installed without its
# dependencies, which it needs to run but not for that file.
COMPOSE_SCHEMA = "docker-compose==1.29.2"
LINT_DEPS = ["ruff>=0.6"]
TYPE_DEPS = ["mypy>=1.10", "types-setuptools"]  # setuptools: for the build helpers


# gregor-protocol's wheel, for the builds of the packages that compile against its header.
WHEELS = ROOT / ".nox" / "wheels"
# Skip the C extensions at run time: each module takes its pure-Python reference.
NO_EXTENSIONS = {"GREGOR_NO_EXTENSIONS": "1"}
SCHEMA_ONLY_TESTS = [
    "test_apis_roundtrip",
    "test_crosscheck_messages_classic",
    "test_crosscheck_messages_kafka_python",
    "test_crosscheck_messages_kio",
    "test_fuzz_messages",
]


def install(session: nox.Session, *packages: str, extra: list[str] | None = None) -> None:
    """Install Gregor packages from the working tree (editable) plus extra requirements.

    gregor-storage and gregor-client build against gregor-protocol's C header: it is their
    build requirement, which pip installs in an isolated build environment from a
    gregor-protocol wheel built first into .nox/wheels (it is on no package index), as a
    user building from a checkout does (README.md). gregor-protocol comes with every codec.
    """
    args: list[str] = []
    if set(packages) - {"protocol"}:
        _protocol_wheel(session)
        args += ["--find-links", str(WHEELS)]
    for name in packages:
        args += ["-e", f"{ROOT / 'packages' / name}{'[all]' if name == 'protocol' else ''}"]
    session.install(*args, *(extra or []))


_wheels_built: set[str] = set()


def _protocol_wheel(session: nox.Session) -> None:
    # Once per nox run and interpreter: it is rebuilt from the working tree on each run.
    if str(session.python) not in _wheels_built:
        protocol = str(ROOT / "packages" / "protocol")
        session.run_install(
            "python", "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(WHEELS), protocol
        )
        _wheels_built.add(str(session.python))


def pytest(
    session: nox.Session,
    *paths: str,
    options: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
) -> None:
    # A package with no tests yet has no tests/ folder in a clean checkout (git keeps no
    # empty folders); pytest would fail on the missing path.
    present = [path for path in paths if any((ROOT / path).glob("*"))]
    if not present:
        session.skip(f"no tests: {', '.join(paths)} holds none yet")
    session.run("pytest", *present, *options, *session.posargs, env=env)


def install_suite(session: nox.Session) -> None:
    """What the whole suite (every package's tests and tests/) needs."""
    install(session, *PACKAGES, extra=[*LAUNCHER, *TEST_DEPS])
    session.install("--no-deps", COMPOSE_SCHEMA)


@nox.session
def tests(session: nox.Session) -> None:
    """Every package's unit tests, then the cross-package suites in tests/."""
    install_suite(session)
    # The slowest tests are listed, so a CI log tells what to move to a long session.
    pytest(
        session,
        *[f"packages/{name}/tests" for name in PACKAGES],
        "tests",
        options=("--durations=40",),
    )


@nox.session
def interop(session: nox.Session) -> None:
    """The five-client matrix (every test marked `interop(client, column)`, in tests/interop
    and beside the per-client suites): prints the table, PASS / FAIL / N/A / XFAIL per cell
    with each client's version, and writes it to docs/compatibility.md. `tests` runs the
    same cells."""
    install(session, *PACKAGES, extra=[*LAUNCHER, *TEST_DEPS])
    report = ROOT / "docs" / "compatibility.md"
    session.run("pytest", "tests", "-m", "interop", f"--matrix={report}", *session.posargs)


@nox.session
def kafkajs_stress(session: nox.Session) -> None:
    """100 new KafkaJS consumer groups on fresh topics, each reading all its records (the
    issue 10 stall's hunt; the default run does 4): GREGOR_KAFKAJS_STRESS iterations."""
    install(session, *PACKAGES, extra=[*LAUNCHER, *TEST_DEPS])
    env = {"GREGOR_KAFKAJS_STRESS": os.environ.get("GREGOR_KAFKAJS_STRESS", "100")}
    test = "tests/interop/test_kafkajs_stress.py"
    session.run("pytest", test, "-s", "--timeout=10800", *session.posargs, env=env)


@nox.session
def unit_pure(session: nox.Session) -> None:
    """Every package's unit tests on the pure-Python references (GREGOR_NO_EXTENSIONS=1), so
    that the references of the C twins cannot rot (in the default run)."""
    install(session, *PACKAGES, extra=TEST_DEPS)
    pytest(
        session,
        *[f"packages/{name}/tests" for name in PACKAGES],
        # The message codecs have no C twin: their tests would run the same code again.
        options=tuple(f"--ignore=packages/protocol/tests/{n}.py" for n in SCHEMA_ONLY_TESTS),
        env=NO_EXTENSIONS,
    )


@nox.session
def tests_pure(session: nox.Session) -> None:
    """The whole suite of `tests` on the pure-Python references (GREGOR_NO_EXTENSIONS=1)."""
    install_suite(session)
    pytest(session, *[f"packages/{name}/tests" for name in PACKAGES], "tests", env=NO_EXTENSIONS)


def package_session(name: str) -> None:
    def run(session: nox.Session) -> None:
        install(session, *PACKAGES[: PACKAGES.index(name) + 1], extra=TEST_DEPS)
        pytest(session, f"packages/{name}/tests")

    run.__doc__ = f"The gregor-{name} unit tests."
    nox.session(name=name)(run)


for _name in PACKAGES:
    package_session(_name)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff check and ruff format --check over the whole tree."""
    session.install(*LINT_DEPS)
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session
def typecheck(session: nox.Session) -> None:
    """mypy, strict, over every package's sources and the launcher's."""
    install(session, *PACKAGES, extra=[*LAUNCHER, *TYPE_DEPS])
    with_code = [n for n in PACKAGES if any((ROOT / "packages" / n / "src").rglob("*.py"))]
    names = [*with_code, "devcluster"]
    session.run("mypy", *[arg for name in names for arg in ("-p", f"gregor.{name}")])


@nox.session
def cluster(session: nox.Session) -> None:
    """The main job: ZooKeeper and three brokers on 127.0.0.1:9092-9094 until Ctrl-C
    (-- --help for the options: --dir, --brokers, --port, --zookeeper-port)."""
    install(session, *PACKAGES, extra=LAUNCHER)
    # After Ctrl-C the cluster needs a few seconds to stop its brokers and ZooKeeper; nox's
    # default is to SIGTERM it after 0.3 s.
    session.run("python", "-m", "gregor.devcluster", *session.posargs, interrupt_timeout=120)


@nox.session
def topology(session: nox.Session) -> None:
    """The two-datacenter topology of infra/topology.toml as network namespaces (root):
    `-- up` runs it until Ctrl-C; `-- status` and `-- down` (also after a crash) from
    another shell; --dir (default .topology), --run-id, --network-only."""
    install(session, *PACKAGES, extra=LAUNCHER)
    # As for the cluster: after Ctrl-C the brokers and ZooKeepers need a few seconds to stop.
    session.run(
        "python", "-m", "gregor.devcluster.netns_cli", *session.posargs, interrupt_timeout=120
    )


@nox.session
def compose(session: nox.Session) -> None:
    """Regenerate infra/compose (docker-compose.yml and each host's config) from
    infra/topology.toml; a test fails while they differ."""
    install(session, *PACKAGES, extra=LAUNCHER)
    session.run("python", "-m", "gregor.devcluster.compose", *session.posargs)


@nox.session
def topology_cycles(session: nox.Session) -> None:
    """The topology up and down cleanly 10 times in a row (GREGOR_TOPOLOGY_CYCLES); the
    default suite runs 2."""
    install(session, *PACKAGES, extra=[*LAUNCHER, *TEST_DEPS])
    env = {"GREGOR_TOPOLOGY_CYCLES": os.environ.get("GREGOR_TOPOLOGY_CYCLES", "10")}
    test = "tests/topology/test_cluster.py::test_up_and_down_cleanly_again_and_again"
    session.run("pytest", test, "-s", "--timeout=3600", *session.posargs, env=env)


@nox.session
def faults(session: nox.Session) -> None:
    """Jepsen-style fault runs on dc1's cluster of the namespace topology (needs root):
    `nox -s faults -- --runs N --seed S [--seconds T]`; prints a table and a total line.
    A long session goes in chunks (`--first N --dir D`, then `--table D1 D2 ...`). The
    default suite runs a short variant (tests/faults)."""
    install(session, *PACKAGES, extra=[*LAUNCHER, *TEST_DEPS])
    tests = str(ROOT / "tests")
    session.run(
        "python", "-m", "gregor_testing.faultruns", *session.posargs, env={"PYTHONPATH": tests}
    )


@nox.session
def faults_two_dc(session: nox.Session) -> None:
    """The fault runs of `nox -s faults` on both datacenters (needs root): dc2's mirror
    copying dc1 exactly once and dc1's ETL loading it are struck too (killed, paused,
    restarted, cut off; the WAN cut), and their copies checked against dc1's acknowledgements
    (`-- --runs N --seed S [--seconds T] [--service-faults F]`; chunks as for faults). The
    default suite runs 2 short runs (tests/faults/test_two_datacenters.py)."""
    install(session, *PACKAGES, extra=[*LAUNCHER, *TEST_DEPS])
    tests = str(ROOT / "tests")
    session.run(
        "python", "-m", "gregor_testing.faultruns", "--two-datacenters", *session.posargs,
        env={"PYTHONPATH": tests},
    )  # fmt: skip


@nox.session
def docs(session: nox.Session) -> None:
    """Regenerate docs/configuration.md from the config declarations (a test checks it)."""
    install(session, *PACKAGES)
    session.run("python", "docs/config_reference.py")


@nox.session
def fuzz_records(session: nox.Session) -> None:
    """Long fuzzing of record batches, message sets and codecs: the C and pure-Python paths."""
    install(session, "protocol", extra=TEST_DEPS)
    fuzz = "packages/protocol/tests/test_fuzz_records.py"
    scale = {"GREGOR_FUZZ_SCALE": "50"}
    session.run("pytest", fuzz, *session.posargs, env=scale)
    session.run("pytest", fuzz, *session.posargs, env={**scale, **NO_EXTENSIONS})


@nox.session
def bench_protocol(session: nox.Session) -> None:
    """Record batch encode/decode: gregor-protocol against kafka-python and aiokafka."""
    install(session, "protocol", extra=["kafka-python>=2.0.2", "aiokafka>=0.11"])
    session.run("python", "bench/bench_protocol.py", *session.posargs)


@nox.session
def bench_broker(session: nox.Session) -> None:
    """Broker throughput with confluent-kafka, as ratios to the client's own ceiling
    (--security: over SSL and SASL_SSL, as ratios to PLAINTEXT)."""
    install(session, *PACKAGES, extra=[*LAUNCHER, "confluent-kafka>=2.4", "kazoo>=2.9", "trustme"])
    session.run("python", "bench/bench_broker.py", *session.posargs)


@nox.session
def bench_transactions(session: nox.Session) -> None:
    """Transactions of 1,000 records (acks=all, 3 brokers, RF=3) as a ratio to the same
    producer idempotent only: confluent-kafka, then gregor-client (--records N, --clients C,
    --rounds R, --only confluent|gregor)."""
    install(session, *PACKAGES, extra=[*LAUNCHER, "confluent-kafka>=2.4", "kazoo>=2.9"])
    session.run("python", "bench/bench_transactions.py", *session.posargs)


@nox.session
def bench_rebalance(session: nox.Session) -> None:
    """The time a 10-member group takes to settle after an 11th joins, and what the others
    read meanwhile: classic eager, cooperative-sticky and KIP-848 (--members, --partitions,
    --rate)."""
    install(session, *PACKAGES, extra=[*LAUNCHER, "confluent-kafka>=2.4", "kazoo>=2.9"])
    session.run("python", "bench/bench_rebalance.py", *session.posargs)


@nox.session
def fuzz_protocol(session: nox.Session) -> None:
    """Long fuzzing and round trips of every Kafka message (GREGOR_FUZZ_SCALE, default 50)."""
    # Every package: the root conftest loads the shared cluster fixtures.
    install(session, *PACKAGES, extra=TEST_DEPS)
    tests = [
        "packages/protocol/tests/test_fuzz_messages.py",
        "packages/protocol/tests/test_apis_roundtrip.py",
    ]
    scale = {"GREGOR_FUZZ_SCALE": os.environ.get("GREGOR_FUZZ_SCALE", "50")}
    session.run("pytest", *tests, "--timeout=3600", *session.posargs, env=scale)


@nox.session
def bench_storage(session: nox.Session) -> None:
    """gregor-storage against raw os.write / os.sendfile, lookups over 10,000 segments, and
    recovery speed (--only append|read|lookup|recovery, --recovery-mib M)."""
    install(session, "protocol", "storage")
    session.run("python", "bench/bench_storage.py", *session.posargs)


@nox.session
def bench_client(session: nox.Session) -> None:
    """gregor-client (sync and async) against kafka-python, aiokafka and confluent-kafka:
    1,000,000 records of 100 bytes produced and consumed on one broker (--records N,
    --rounds R, --only NAME ...)."""
    install(
        session,
        *PACKAGES,
        extra=[
            *LAUNCHER,
            "kafka-python>=2.0.2",
            "aiokafka>=0.11",
            "confluent-kafka>=2.4",
            "kazoo>=2.9",
        ],
    )
    session.run("python", "bench/bench_client.py", *session.posargs)


@nox.session
def spark_etl_faults(session: nox.Session) -> None:
    """gregor-etl killed (SIGKILL) 5 times while a million records are produced, then
    checked for every record exactly once (GREGOR_ETL_RECORDS, GREGOR_ETL_KILLS)."""
    install(session, *PACKAGES, extra=[*LAUNCHER, *TEST_DEPS])
    env = {
        "GREGOR_ETL_RECORDS": os.environ.get("GREGOR_ETL_RECORDS", "1000000"),
        "GREGOR_ETL_KILLS": os.environ.get("GREGOR_ETL_KILLS", "5"),
    }
    session.run("pytest", "tests/spark/test_etl.py", "--timeout=3600", *session.posargs, env=env)


@nox.session
def topology_etl_faults(session: nox.Session) -> None:
    """gregor-etl as a service on the topology's ETL host, loading dc1's topic while
    producers write for 5 minutes (GREGOR_ETL_TOPOLOGY_SECONDS) and 6 rounds of faults
    strike (the controller killed, the ETL host cut off, its driver killed, paused); then
    every acknowledged record is in the warehouse once. The default suite strikes the ETL
    in its two-datacenter fault runs instead (tests/faults/test_two_datacenters.py)."""
    install(session, *PACKAGES, extra=[*LAUNCHER, *TEST_DEPS])
    env = {"GREGOR_ETL_TOPOLOGY_SECONDS": os.environ.get("GREGOR_ETL_TOPOLOGY_SECONDS", "300")}
    test = "tests/topology/test_etl.py"
    session.run("pytest", test, "-s", "--timeout=3600", *session.posargs, env=env)


@nox.session
def txn_faults(session: nox.Session) -> None:
    """The exactly-once pipeline of tests/transactions/test_txn_failover.py through
    GREGOR_TXN_FAULTS (default 100) SIGKILLs of the transaction coordinator, a partition
    leader and the controller, round robin, then checked for every record exactly once; the
    figures are printed. A long session goes in chunks, each a cluster of its own checked on
    its own: `nox -s txn_faults -- faults-long=20 -k gregor-client` runs 20 faults (five of
    them make 100), and its command line names it a long run for the shared lock."""
    install(session, *PACKAGES, extra=[*LAUNCHER, *TEST_DEPS])
    faults = os.environ.get("GREGOR_TXN_FAULTS", "100")
    args = list(session.posargs)
    if args and args[0].startswith("faults-long="):
        faults = args.pop(0).removeprefix("faults-long=")
    session.run(
        "pytest",
        "tests/transactions/test_txn_failover.py",
        "-s",
        "--timeout=7200",
        *args,
        env={"GREGOR_TXN_FAULTS": faults},
    )


@nox.session
def mirror_faults(session: nox.Session) -> None:
    """gregor-mirror SIGKILLed 5 times while 200,000 records are produced and copied, then
    checked for every record on the target, in order: at least once (the duplicates are
    counted and printed), and exactly once (read_committed: each record once)
    (GREGOR_MIRROR_RECORDS, GREGOR_MIRROR_KILLS)."""
    install(session, *PACKAGES, extra=[*LAUNCHER, *TEST_DEPS])
    env = {
        "GREGOR_MIRROR_RECORDS": os.environ.get("GREGOR_MIRROR_RECORDS", "200000"),
        "GREGOR_MIRROR_KILLS": os.environ.get("GREGOR_MIRROR_KILLS", "5"),
    }
    test = "tests/mirror/test_mirror.py::test_sigkill_loses_nothing_and_translation_stays_exact"
    session.run("pytest", test, "-s", "--timeout=3600", *session.posargs, env=env)


@nox.session
def bench_spark(session: nox.Session) -> None:
    """A batch read of 5,000,000 100-byte records from a 6-partition topic into Parquet on
    local[2], as a ratio to one confluent-kafka consumer writing Parquet with pyarrow
    (--records N, --master URL)."""
    install(session, *PACKAGES, extra=[*LAUNCHER, "confluent-kafka>=2.4", "kazoo>=2.9"])
    session.run("python", "bench/bench_spark.py", *session.posargs)


@nox.session
def bench_client_timeouts(session: nox.Session) -> None:
    """How closely gregor-client keeps delivery.timeout.ms and max.block.ms (--rounds N), as
    ratios to the configured values, against the client tests' scripted broker."""
    install(session, "protocol", "client")
    session.run("python", "bench/bench_client_timeouts.py", *session.posargs)


@nox.session
def bench_mirror(session: nox.Session) -> None:
    """gregor-mirror A->B against a confluent-kafka consume-produce loop (MirrorMaker 1's
    design), same records, same run: records/s and CPU per record (--records N)."""
    install(session, *PACKAGES, extra=[*LAUNCHER, "confluent-kafka>=2.4", "kazoo>=2.9"])
    session.run("python", "bench/bench_mirror.py", *session.posargs)


@nox.session
def bench_peers(session: nox.Session) -> None:
    """The Kafka paper's experiment: Gregor (confluent-kafka, gregor-client) against
    RabbitMQ, ActiveMQ and NATS JetStream, 200-byte messages, acknowledged durable writes;
    installs the peers from Debian first (infra/peers.sh). Writes bench/results/peers.png
    and peers.json (--messages N, --single N, --rounds R, --only NAME ...)."""
    session.run(str(ROOT / "infra" / "peers.sh"), external=True)
    # The peers' usual Python clients, and matplotlib for the chart.
    peer_clients = ["aio-pika>=9", "stomp-py>=8", "nats-py>=2.6", "matplotlib>=3.7"]
    install(session, *PACKAGES, extra=[*LAUNCHER, "confluent-kafka>=2.4", *peer_clients])
    session.run("python", "bench/bench_peers.py", *session.posargs)


@nox.session
def bench_latency(session: nox.Session) -> None:
    """End-to-end latency, produce to consume, at 1k, 10k and 100k records/s of 100 bytes:
    acks=all and acks=1 on 3 brokers (RF=3), then one broker; p50/p99/p99.9/max; each
    under the default scheduling policy and under SCHED_BATCH (--seconds S, --loads R ...,
    --settings BROKERS:ACKS ..., --policies other|batch ..., --repeat N: each load N times,
    the goal's verdict on the median p99)."""
    install(session, *PACKAGES, extra=[*LAUNCHER, "confluent-kafka>=2.4"])
    session.run("python", "bench/bench_latency.py", *session.posargs)


@nox.session
def bench_round(session: nox.Session) -> None:
    """The CPU of one replication round (a single acks=all record, RF 3) on each broker,
    against a trio echo server's CPU per request measured in the same run
    (--records N, --filler P: a quiet P-partition topic beside, --echo N)."""
    install(session, *PACKAGES, extra=[*LAUNCHER, "confluent-kafka>=2.4"])
    session.run("python", "bench/bench_round.py", *session.posargs)


@nox.session
def bench_scale(session: nox.Session) -> None:
    """One broker with 1,000 then 10,000 partitions (RF=1), 1,000 idle connections and 100
    producers: RSS, fds, Metadata latency, produce spread over every partition against 10,
    restart and SIGKILL recovery (--partitions N ..., --records-per-producer R)."""
    install(session, *PACKAGES, extra=[*LAUNCHER, "confluent-kafka>=2.4"])
    session.run("python", "bench/bench_scale.py", *session.posargs)


@nox.session
def bench_controller(session: nox.Session) -> None:
    """The controller with 1,000 topics x 10 partitions on 3 brokers: creating them, and a
    failover of the controller (SIGKILL, then a clean shutdown) until every partition is led
    again (--topics N --partitions P --replication-factor R)."""
    install(session, *PACKAGES, extra=LAUNCHER)
    session.run("python", "bench/bench_controller.py", *session.posargs)
