"""Broker throughput: confluent-kafka produces 100-byte records into gregor-broker (acks=1,
linger 5 ms, batches up to 1 MB), then consumes them; the same again on three brokers with
RF=3 and acks=all.

The ceiling the client sets is measured in the same run: the same clients against a stub
broker (built with gregor-protocol) that answers every Produce at once without storing
anything, and every Fetch at once with records it made up. Gregor's figures are printed as
ratios to those ceilings. One Python process cannot drive confluent-kafka much past 200,000
records/s on a slow machine, so the clients are `--clients` processes at once (4 by
default), each with partitions of its own. Each figure is the best of `--rounds` runs.
Targets on the 2-core machine: at least 500,000 records/s produced into one broker, at
least 1,000,000 records/s consumed. The log is also read by kcat (librdkafka's C consumer,
without confluent-kafka's Python object per record), as a peer consumer.

With `--security`, one broker with PLAINTEXT, SSL and SASL_SSL (PLAIN) listeners instead:
the same produce and consume over each, printed as ratios to PLAINTEXT in the same run (TLS
costs the broker user-space encryption, and fetches lose sendfile); goal: SASL_SSL produce
at least 0.6 of PLAINTEXT.

    python bench/bench_broker.py [--records N] [--clients C] [--rounds R] [--skip-replicated]
    python bench/bench_broker.py --security [--records N] [--clients C] [--rounds R]
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from functools import partial
from multiprocessing.synchronize import Barrier
from pathlib import Path
from typing import Any

VALUE = b"v" * 100
TOPIC = "bench"
PARTITIONS_PER_CLIENT = 2
PRODUCER = {
    "linger.ms": 5,
    "batch.size": 1_000_000,
    "queue.buffering.max.messages": 4_000_000,
    "queue.buffering.max.kbytes": 2_097_151,
    "enable.idempotence": False,
    "delivery.report.only.error": True,
}
CONSUMER = {
    "group.id": "bench-no-commits",
    "enable.auto.commit": False,
    "fetch.max.bytes": 52_428_800,
    "max.partition.fetch.bytes": 8_388_608,
    "queued.max.messages.kbytes": 1_048_576,
}
TARGET_PRODUCE = 500_000
TARGET_CONSUME = 1_000_000
SECURITY_GOAL = 0.6  # SASL_SSL produce over PLAINTEXT (Kafka loses some 20-30% to TLS)


# -- the stub broker -------------------------------------------------------------------------


def run_stub(port: int, partitions: int, high_watermark: int) -> None:
    """A broker leading every partition of one topic: it drops what is produced, and serves
    fetches with made-up batches of 100-byte records up to `high_watermark`."""
    import trio

    # The stub's answers are shared test support (tests/gregor_testing/stub_broker.py).
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from gregor.protocol.apis import ApiKey
    from gregor.protocol.apis.fetch import (
        FetchableTopicResponse,
        FetchRequest,
        FetchResponse,
        PartitionData,
    )
    from gregor.protocol.apis.metadata import MetadataRequest
    from gregor.protocol.apis.produce import ProduceRequest
    from gregor.protocol.framing import FrameReader, decode_request, encode_response
    from gregor.protocol.records import BatchBuilder, patch_base_offset
    from gregor.protocol.schema import Request, Response
    from gregor_testing.stub_broker import api_versions_answer, metadata_answer, produce_answer

    versions = {
        ApiKey.PRODUCE: (3, 9),
        ApiKey.FETCH: (4, 11),
        ApiKey.METADATA: (0, 9),
        ApiKey.API_VERSIONS: (0, 3),
    }
    per_batch = 10_000
    builder = BatchBuilder()
    for _ in range(per_batch):
        builder.append(VALUE, timestamp=1_700_000_000_000)
    template = builder.build()
    produced: dict[int, int] = {}

    def count(records: bytes | bytearray | memoryview) -> int:
        # librdkafka sends one batch per partition: its header says how many records.
        return int.from_bytes(records[57:61], "big") if records else 0

    # Fetches are answered from one buffer of batches whose base offsets are patched in
    # place for each request: the stub copies as little as a broker would.
    blobs: dict[int, tuple[bytearray, memoryview]] = {}

    def records_from(offset: int, max_bytes: int) -> memoryview:
        batches = max(
            1, min(max_bytes // len(template), -(-(high_watermark - offset) // per_batch))
        )
        if offset >= high_watermark:
            return memoryview(b"")
        if batches not in blobs:
            blob = bytearray(template * batches)
            blobs[batches] = (blob, memoryview(blob))
        blob, view = blobs[batches]
        for i in range(batches):
            patch_base_offset(blob, i * len(template), offset + i * per_batch)
        return view

    def answer(body: Request, version: int) -> Response | None:
        if isinstance(body, ProduceRequest):
            return None if body.acks == 0 else produce_answer(body, produced, count)
        if isinstance(body, FetchRequest):
            return FetchResponse(
                responses=[
                    FetchableTopicResponse(
                        topic=t.topic,
                        partitions=[
                            PartitionData(
                                partition_index=p.partition,
                                high_watermark=high_watermark,
                                last_stable_offset=high_watermark,
                                log_start_offset=0,
                                records=records_from(p.fetch_offset, p.partition_max_bytes),
                            )
                            for p in t.partitions
                        ],
                    )
                    for t in body.topics
                ]
            )
        if isinstance(body, MetadataRequest):
            return metadata_answer(
                body, node_id=0, port=port, topic=TOPIC, partitions=partitions, cluster_id="stub"
            )
        return api_versions_answer(versions)

    async def serve(stream: trio.SocketStream) -> None:
        frames = FrameReader(1 << 30)
        # A client that exits may reset its connection under an answer: that connection
        # ends, the stub (serve_tcp would stop on the error) goes on.
        with contextlib.suppress(trio.BrokenResourceError):
            async with stream:
                while data := await stream.receive_some(1 << 20):
                    frames.feed(data)
                    while (frame := frames.next_frame()) is not None:
                        header, body = decode_request(frame)
                        version = header.request_api_version
                        response = answer(body, version)
                        if response is not None:
                            await stream.send_all(
                                encode_response(response, version, header.correlation_id)
                            )

    trio.run(trio.serve_tcp, serve, port)


# -- the clients (each in a process of its own) ----------------------------------------------


def fill(
    bootstrap: str, topic: str, records: int, partitions: int, settings: dict[str, Any]
) -> None:
    """A benchmark's input, untimed: `records` of VALUE round robin over `partitions`, with
    confluent-kafka and `settings` on top of big batches and no idempotence."""
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "batch.size": 1_000_000,
            "queue.buffering.max.messages": 2_000_000,
            "enable.idempotence": False,
            **settings,
        }
    )
    for n in range(records):
        while True:
            try:
                producer.produce(topic, VALUE, partition=n % partitions)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(300) == 0


def produce_worker(
    client: dict[str, Any], acks: str, partitions: list[int], records: int, go: Barrier
) -> float:
    from confluent_kafka import Producer

    producer = Producer({**client, "acks": acks, **PRODUCER})
    errors: list[object] = []
    producer.produce(
        TOPIC, VALUE, None, partitions[0], lambda e, _m: errors.append(e) if e else None
    )
    producer.flush(60)  # metadata and connections, before the clock starts
    go.wait()
    started = time.perf_counter()
    send, poll = producer.produce, producer.poll
    per_partition = records // len(partitions)
    for partition in partitions:
        for _ in range(per_partition):
            try:
                send(TOPIC, VALUE, None, partition)
            except BufferError:
                poll(0.005)
                send(TOPIC, VALUE, None, partition)
    remaining = producer.flush(600)
    elapsed = time.perf_counter() - started
    if remaining or errors:
        raise RuntimeError(f"{remaining} records not delivered, errors: {errors[:3]}")
    return elapsed


def consume_worker(
    client: dict[str, Any], partitions: list[int], records: int, go: Barrier
) -> float:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({**client, **CONSUMER})
    consumer.assign([TopicPartition(TOPIC, p, 0) for p in partitions])
    go.wait()
    started = time.perf_counter()
    seen = 0
    take = consumer.consume
    while seen < records:
        # Never ask for more than is left: consume() waits its whole timeout for the rest.
        batch = take(min(100_000, records - seen), 10)
        if not batch:
            raise RuntimeError(f"consumption stalled after {seen} of {records} records")
        seen += len(batch)
    elapsed = time.perf_counter() - started
    consumer.close()
    return elapsed


def records_in_log(bootstrap: str, partitions: int) -> int:
    """Every record of the topic (each produce round added its own)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-no-commits"})
    try:
        total = 0
        for partition in range(partitions):
            low, high = consumer.get_watermark_offsets(TopicPartition(TOPIC, partition), 10)
            total += high - low
        return total
    finally:
        consumer.close()


def kcat_consume(bootstrap: str, records: int) -> float:
    """Seconds for kcat (librdkafka's C consumer, no Python object per record) to read every
    partition of the topic from the beginning to its end; it prints one short line per
    record, counted here so that a short read fails."""
    command = ["kcat", "-C", "-b", bootstrap, "-e", "-q", "-f", "%p\\n"]
    for option in ("fetch.max.bytes", "max.partition.fetch.bytes", "queued.max.messages.kbytes"):
        command += ["-X", f"{option}={CONSUMER[option]}"]
    command += ["-t", TOPIC, "-o", "beginning"]  # every partition
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, timeout=600, check=True)
    elapsed = time.perf_counter() - started
    seen = done.stdout.count(b"\n")
    if seen != records:
        raise RuntimeError(f"kcat read {seen} records, not {records}")
    return elapsed


def _child(work: Callable[..., float], args: tuple[Any, ...], results: Any) -> None:
    try:
        results.put(work(*args))
    except BaseException as exc:
        results.put(exc)
        raise


def in_parallel(clients: int, work: Callable[..., float], *args: Any) -> float:
    """Run `work(*args[:-1], partitions, records, barrier)` in `clients` processes at once,
    each with partitions of its own; return the slowest one's seconds from the common start."""
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(clients)
    results = context.Queue()
    *fixed, records = args
    processes = [
        context.Process(
            target=_child,
            args=(
                work,
                (
                    *fixed,
                    list(range(c * PARTITIONS_PER_CLIENT, (c + 1) * PARTITIONS_PER_CLIENT)),
                    records // clients,
                    barrier,
                ),
                results,
            ),
        )
        for c in range(clients)
    ]
    for process in processes:
        process.start()
    try:
        outcomes = [results.get(timeout=900) for _ in processes]
    finally:
        for process in processes:
            process.join(30)
            if process.is_alive():
                process.kill()
    failures = [o for o in outcomes if isinstance(o, BaseException)]
    if failures:
        raise RuntimeError(f"a client failed: {failures[0]!r}")
    return max(outcomes)


def line(what: str, records: int, seconds: float, broker_cpu: float | None = None) -> float:
    rate = records / seconds
    text = f"  {what:<48} {rate:>12,.0f} records/s {rate * len(VALUE) / 1e6:>7.1f} MB/s"
    if broker_cpu:
        # What the brokers could do if the clients left them the machine: records per
        # CPU-second they spent (the clients and the brokers share the same two cores).
        text += f"  (brokers' CPU {broker_cpu:.2f}s: {records / broker_cpu:,.0f} records/CPU-s)"
    print(text)
    return rate


def cpu_seconds(pids: list[int]) -> float:
    """User + system time the processes used so far (Linux /proc)."""
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def run_queue_seconds(pids: list[int]) -> float:
    """Time the processes' threads spent runnable but waiting for a core, so far (Linux
    /proc/<pid>/task/<tid>/schedstat, its second field)."""
    return sum(int(text.split()[1]) for text in _task_files(pids, "schedstat")) / 1e9


def preemptions(pids: list[int]) -> int:
    """Times the processes' threads were taken off a core while still ready to run, so far
    (Linux /proc/<pid>/task/<tid>/status, nonvoluntary_ctxt_switches): each is a wait
    for a core to come back."""
    key = "nonvoluntary_ctxt_switches:"
    return sum(int(text.rsplit(key, 1)[1].split()[0]) for text in _task_files(pids, "status"))


def _task_files(pids: list[int], name: str) -> Iterator[str]:
    """The text of /proc/<pid>/task/<tid>/`name` for every thread of the processes."""
    for pid in pids:
        for task in Path(f"/proc/{pid}/task").glob("*"):
            with contextlib.suppress(OSError):  # a thread that just ended
                yield (task / name).read_text()


def machine_busy_seconds() -> float:
    """CPU time every core of the machine spent not idle so far (Linux /proc/stat): what
    the brokers, the clients and everything else used together."""
    fields = [int(f) for f in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle and iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def process_tree(pid: int) -> list[int]:
    """`pid` and its descendants, live (Linux /proc): a start script's server, say."""
    found = [pid]
    for task in Path(f"/proc/{pid}/task").glob("*"):  # a child belongs to the forking thread
        with contextlib.suppress(OSError):
            for child in (task / "children").read_text().split():
                found += process_tree(int(child))
    return found


def measured(pids: list[int], run: Callable[[], float]) -> tuple[float, float]:
    """(wall seconds `run` reports, CPU seconds the processes used meanwhile)."""
    before = cpu_seconds(pids)
    seconds = run()
    return seconds, cpu_seconds(pids) - before


def best_of(rounds: int, pids: list[int], run: Callable[[], float]) -> tuple[float, float]:
    """The fastest of `rounds` runs, measured: a shared 2-core machine is noisy."""
    return min(measured(pids, run) for _ in range(rounds))


# -- the runs --------------------------------------------------------------------------------


def ceilings(records: int, clients: int, rounds: int) -> tuple[float, float]:
    from gregor.devcluster import api_versions, free_port, wait_until

    port = free_port()
    partitions = clients * PARTITIONS_PER_CLIENT
    stub = subprocess.Popen(
        [sys.executable, __file__, "--stub", str(port), str(partitions), str(records)]
    )
    try:
        wait_until(lambda: api_versions("127.0.0.1", port) is not None, 30, "the stub broker")
        client = {"bootstrap.servers": f"127.0.0.1:{port}"}
        produced = line(
            "stub broker: produce (the client's ceiling)",
            records,
            *best_of(
                rounds, [], lambda: in_parallel(clients, produce_worker, client, "1", records)
            ),
        )
        consumed = line(
            "stub broker: consume (the client's ceiling)",
            records,
            *best_of(
                rounds,
                [],
                lambda: in_parallel(clients, consume_worker, client, records // clients * clients),
            ),
        )
    finally:
        stub.kill()
        stub.wait()
    return produced, consumed


def gregor_run(
    records: int, clients: int, brokers: int, acks: str, rounds: int
) -> tuple[float, float, float]:
    """Produced and consumed records/s with confluent-kafka, then consumed with kcat."""
    from gregor.devcluster import LocalCluster, create_topic

    with tempfile.TemporaryDirectory(prefix="bench-broker-") as tmp:
        cluster = LocalCluster(
            Path(tmp),
            brokers,
            properties={"gregor.metrics.log.interval.ms": "0", "log.segment.bytes": "536870912"},
        )
        cluster.start()
        try:
            create_topic(cluster, TOPIC, clients * PARTITIONS_PER_CLIENT, brokers)
            label = f"{brokers} broker{'s' if brokers > 1 else ''}, RF={brokers}, acks={acks}"
            bootstrap = cluster.bootstrap_servers
            client = {"bootstrap.servers": bootstrap}
            pids = [b.pid for b in cluster.brokers if b.pid is not None]
            produced = line(
                f"gregor produce ({label})",
                records,
                *best_of(
                    rounds,
                    pids,
                    lambda: in_parallel(clients, produce_worker, client, acks, records),
                ),
            )
            consumed = line(
                f"gregor consume ({label})",
                records,
                *best_of(
                    rounds,
                    pids,
                    lambda: in_parallel(
                        clients, consume_worker, client, records // clients * clients
                    ),
                ),
            )
            # The same log read by librdkafka's C consumer alone: what the broker delivers
            # when the consumer is not the Python layer (whose ceiling the stub shows).
            in_log = records_in_log(bootstrap, clients * PARTITIONS_PER_CLIENT)
            peer = line(
                f"gregor consume with kcat ({label})",
                in_log,
                *best_of(rounds, pids, lambda: kcat_consume(bootstrap, in_log)),
            )
        finally:
            cluster.stop()
    return produced, consumed, peer


def security_run(records: int, clients: int, rounds: int) -> None:
    """One broker with PLAINTEXT, SSL and SASL_SSL (PLAIN) listeners: produce and consume
    over each, printed as ratios to PLAINTEXT in the same run."""
    import trustme

    from gregor.devcluster import LocalCluster, create_topic

    with tempfile.TemporaryDirectory(prefix="bench-broker-security-") as tmp:
        ca, ca_path, keystore = trustme.CA(), Path(tmp, "ca.pem"), Path(tmp, "broker.pem")
        ca.cert_pem.write_to_path(str(ca_path))
        ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(keystore))
        jaas = 'org.apache.kafka.common.security.plain.PlainLoginModule required user_bench="b";'
        cluster = LocalCluster(
            Path(tmp, "cluster"),
            1,
            properties={
                "gregor.metrics.log.interval.ms": "0",
                "log.segment.bytes": "536870912",
                "ssl.keystore.location": str(keystore),
                "sasl.enabled.mechanisms": "PLAIN",
                "listener.name.sasl_ssl.plain.sasl.jaas.config": jaas,
            },
            listeners={"SSL": "SSL", "SASL_SSL": "SASL_SSL"},
        )
        cluster.start()
        try:
            create_topic(cluster, TOPIC, clients * PARTITIONS_PER_CLIENT, 1)
            pids = [b.pid for b in cluster.brokers if b.pid is not None]
            tls = {"ssl.ca.location": str(ca_path)}
            sasl = {"sasl.mechanism": "PLAIN", "sasl.username": "bench", "sasl.password": "b"}
            rates: dict[str, tuple[float, float]] = {}
            for listener, extra in (
                ("PLAINTEXT", {}),
                ("SSL", tls),
                ("SASL_SSL", {**tls, **sasl}),
            ):
                client = {
                    "bootstrap.servers": cluster.bootstrap_servers_of(listener),
                    "security.protocol": listener,
                    **extra,
                }
                produced = line(
                    f"gregor produce over {listener}",
                    records,
                    *best_of(
                        rounds,
                        pids,
                        partial(in_parallel, clients, produce_worker, client, "1", records),
                    ),
                )
                consumed = line(
                    f"gregor consume over {listener}",
                    records,
                    *best_of(
                        rounds,
                        pids,
                        partial(
                            in_parallel,
                            clients,
                            consume_worker,
                            client,
                            records // clients * clients,
                        ),
                    ),
                )
                rates[listener] = produced, consumed
        finally:
            cluster.stop()
    plain_produce, plain_consume = rates["PLAINTEXT"]
    for listener in ("SSL", "SASL_SSL"):
        produced, consumed = rates[listener]
        print(
            f"  {listener} / PLAINTEXT: produce {produced / plain_produce:.2f}, "
            f"consume {consumed / plain_consume:.2f}"
        )
    verdict = "met" if rates["SASL_SSL"][0] / plain_produce >= SECURITY_GOAL else "not met"
    print(f"  goal SASL_SSL produce >= {SECURITY_GOAL} of PLAINTEXT: {verdict}")


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--skip-replicated", action="store_true")
    parser.add_argument("--stub", nargs=3, type=int, metavar=("PORT", "PARTITIONS", "HW"))
    parser.add_argument(
        "--security", action="store_true", help="PLAINTEXT, SSL and SASL_SSL, as ratios"
    )
    args = parser.parse_args()
    if args.stub:
        run_stub(*args.stub)
        return 0
    records = (
        args.records
        // (args.clients * PARTITIONS_PER_CLIENT)
        * (args.clients * PARTITIONS_PER_CLIENT)
    )
    print(
        f"{records:,} records of {len(VALUE)} bytes, {args.clients} client processes, "
        f"{args.clients * PARTITIONS_PER_CLIENT} partitions"
    )
    if args.security:
        security_run(records, args.clients, args.rounds)
        return 0
    produce_ceiling, consume_ceiling = ceilings(records, args.clients, args.rounds)
    produced, consumed, peer = gregor_run(records, args.clients, 1, "1", args.rounds)
    print(
        f"  gregor / ceiling: produce {produced / produce_ceiling:.2f}, "
        f"consume {consumed / consume_ceiling:.2f}"
    )
    for what, rate, target in (
        ("produced", produced, TARGET_PRODUCE),
        ("consumed", consumed, TARGET_CONSUME),
        ("consumed by kcat", peer, TARGET_CONSUME),
    ):
        verdict = "met" if rate >= target else "not met"
        print(f"  target {target:,} records/s {what}: {verdict}")
    if consumed < TARGET_CONSUME and max(consume_ceiling, peer) < TARGET_CONSUME:
        print(
            f"  (the consumers set the limit: confluent-kafka reads {consume_ceiling:,.0f} "
            f"records/s even from the stub, kcat {peer:,.0f} from gregor)"
        )
    if not args.skip_replicated:
        replicated, replicated_consumed, _ = gregor_run(
            records, args.clients, 3, "all", args.rounds
        )
        print(
            "  gregor / ceiling (3 brokers, acks=all): "
            f"produce {replicated / produce_ceiling:.2f}, "
            f"consume {replicated_consumed / consume_ceiling:.2f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
