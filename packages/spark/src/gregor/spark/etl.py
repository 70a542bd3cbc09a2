"""gregor-etl: topics into a Parquet warehouse, each record exactly once across crashes.

    gregor-etl --bootstrap-servers B --topics T1,T2 --warehouse PATH [--master URL]
               [--partition-by date,hour] [--value-format raw|json --schema FILE]
               [--max-records-per-batch N] [--group G] [--every SECONDS]
               [--metrics-listener http://HOST:PORT [--metrics-linger SECONDS]]
               [--log-format text|json]

One Structured Streaming query per topic, run with Trigger.AvailableNow: it reads what the
topic holds now through the `gregor` source and stops. With --every, the queries run as a
service instead, a micro-batch every SECONDS, until SIGTERM or Ctrl-C; topics that appear
and match --pattern are loaded too, and a query that fails (a cluster unreachable for long)
is reported and started again after a pause. Spark is the engine; this module only wires
the query. Exactly once rests on offsets kept with the output (the Hadoop load of the
Kafka paper, which needs no transactions from the broker):

- the query's checkpoint (PATH/_checkpoints/<topic>) holds the offsets of each micro-batch
  before it runs, and the file sink's log (PATH/<topic>/_spark_metadata) lists the files of
  each batch once they are all written; a rerun redoes a batch whose files were never
  listed and skips one that was;
- files a killed attempt left behind, listed nowhere, are deleted before the rerun starts,
  so any Parquet reader (pyarrow, Hive, Trino) sees each record once, not only Spark.

Tables are Hive-style: PATH/<topic>/date=YYYY-MM-DD/hour=HH/part-*.parquet. With
--value-format json, the value's fields (--schema: a Spark DDL string or a JSON schema file)
become columns, and a value that does not parse goes to PATH/_rejected/<topic> with its
topic, partition, offset and the reason. After every committed batch the group's offsets
(--group, default gregor-etl) are committed to the cluster, so Kafka tools show the lag.

With --metrics-listener, the run's metrics (records read, written and rejected, batches and
their durations, committed offsets and lag per partition: see gregor.spark.metrics) are
served to Prometheus while it runs, and --metrics-linger seconds after it (until SIGTERM or
SIGINT), so that a scrape sees the final figures of a short run.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import logging
import os
import re
import signal
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gregor.client import Consumer, TopicPartition
from gregor.client.exporter import parse_listener, serving
from gregor.client.logs import JsonFormatter
from gregor.spark.metrics import EtlCollector, EtlMetrics
from gregor.spark.planning import INTERNAL_TOPICS, by_tp, from_json_offsets

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

CHECKPOINTS = "_checkpoints"
REJECTED = "_rejected"
CORRUPT = "_corrupt_record"
OBSERVED = "gregor_etl_rows"  # each output's rows per batch, counted by Spark (observe())
RESTART_PAUSE = 5.0  # seconds before a service's failed queries start again
REFRESH_TOPICS = 10.0  # seconds between a service's looks for new topics (--pattern)

log = logging.getLogger("gregor.etl")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="gregor-etl", description="Topics into a Parquet warehouse, exactly once."
    )
    parser.add_argument("--bootstrap-servers", required=True)
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--topics", help="comma-separated topic names")
    which.add_argument("--pattern", help="a regex that whole topic names match")
    parser.add_argument("--warehouse", required=True, type=Path)
    parser.add_argument("--master", default="local[*]")
    parser.add_argument("--partition-by", default="date,hour")
    parser.add_argument("--value-format", choices=("raw", "json"), default="raw")
    parser.add_argument("--schema", help="the JSON values' schema: a file (Spark DDL or JSON)")
    parser.add_argument("--max-records-per-batch", type=int, default=None)
    parser.add_argument("--group", default="gregor-etl")
    parser.add_argument(
        "--kafka-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="another client option (repeatable), e.g. security.protocol=SSL",
    )
    parser.add_argument(
        "--every",
        type=float,
        metavar="SECONDS",
        help="run as a service: a micro-batch every SECONDS until SIGTERM or Ctrl-C",
    )
    parser.add_argument(
        "--metrics-listener",
        metavar="http://HOST:PORT",
        help="serve metrics for Prometheus there (port 0: any free one)",
    )
    parser.add_argument(
        "--log-format",
        choices=("text", "json"),
        default="text",
        help="text lines, or one JSON object per line (as the broker's log.format)",
    )
    parser.add_argument(
        "--metrics-linger",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="keep serving the final metrics this long after the run (SIGTERM ends it)",
    )
    args = parser.parse_args(argv)
    if args.metrics_listener:
        try:
            args.metrics_listener = parse_listener(args.metrics_listener)
        except ValueError as exc:
            parser.error(f"--metrics-listener {args.metrics_listener}: {exc}")
    if args.value_format == "json" and not args.schema:
        parser.error("--value-format json needs --schema")
    partition_by = [p.strip() for p in args.partition_by.split(",") if p.strip()]
    unknown = [p for p in partition_by if p not in ("date", "hour")]
    if unknown:
        parser.error(f"--partition-by takes date and hour, not {', '.join(unknown)}")
    args.partition_by = partition_by
    if args.max_records_per_batch is not None and args.max_records_per_batch <= 0:
        parser.error("--max-records-per-batch must be positive")
    if args.every is not None and args.every <= 0:
        parser.error("--every must be positive")
    return args


def client_options(args: argparse.Namespace) -> dict[str, str]:
    config = {"bootstrap.servers": args.bootstrap_servers}
    for item in args.kafka_option:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"gregor-etl: --kafka-option needs KEY=VALUE, not {item!r}")
        config[key.strip()] = value.strip()
    return config


def topics_to_load(args: argparse.Namespace, consumer: Consumer) -> list[str]:
    existing = consumer.list_topics()
    if args.topics:
        wanted = [t.strip() for t in args.topics.split(",") if t.strip()]
        missing = [t for t in wanted if t not in existing]
        if missing:
            raise SystemExit(f"gregor-etl: no such topics: {', '.join(missing)}")
        return wanted
    return sorted(t for t in existing if t not in INTERNAL_TOPICS and re.fullmatch(args.pattern, t))


# -- the exactly-once bookkeeping ---------------------------------------------------------


def _local_path(uri: str) -> str:
    """A path of the file sink's log (a URI: `file:///a%20b/x`, `file:/a%20b/x`) as the real
    local path, to compare with what is on disk whatever the spelling."""
    parsed = urllib.parse.urlsplit(uri)
    path = urllib.parse.unquote(parsed.path) if parsed.scheme in ("", "file") else uri
    return os.path.realpath(path)


def committed_files(table: Path) -> set[str]:
    """The data files the file sink's log lists as written (real local paths)."""
    log = table / "_spark_metadata"
    files: set[str] = set()
    if not log.is_dir():
        return files
    for entry in sorted(log.iterdir(), key=lambda p: p.name):
        if not entry.name.split(".")[0].isdigit():
            continue  # the log's temporary files
        for line in entry.read_text().splitlines()[1:]:  # after the version line
            record = json.loads(line)
            path = _local_path(record["path"])
            if record.get("action") == "delete":
                files.discard(path)
            else:
                files.add(path)
    return files


def remove_uncommitted(table: Path) -> list[Path]:
    """Delete the data files no committed batch lists: what a killed attempt left."""
    if not table.is_dir():
        return []
    listed = committed_files(table)
    removed = []
    for path in table.rglob("*.parquet"):
        if "_spark_metadata" in path.parts or os.path.realpath(path) in listed:
            continue
        path.unlink()
        removed.append(path)
    for crc in table.rglob(".*.parquet.crc"):  # Hadoop's checksum files of removed parts
        if not crc.with_name(crc.name[1:].removesuffix(".crc")).exists():
            crc.unlink()
    return removed


def checkpoint_offsets(checkpoint: Path) -> dict[tuple[str, int], int] | None:
    """The end offsets of the last batch the query committed (None: none yet)."""
    commits = checkpoint / "commits"
    done = [int(p.name) for p in commits.iterdir() if p.name.isdigit()] if commits.is_dir() else []
    if not done:
        return None
    lines = (checkpoint / "offsets" / str(max(done))).read_text().splitlines()
    return from_json_offsets(json.loads(lines[-1]))


def commit_group(consumer: Consumer, offsets: Mapping[tuple[str, int], int]) -> None:
    consumer.commit({TopicPartition(t, p): o for (t, p), o in offsets.items()})


def source_offsets(text: str | None) -> dict[tuple[str, int], int] | None:
    """A source's offsets in a progress event, or None where Spark has none: PySpark hands
    a Java null over as the string "None" (the latest offsets of a batch a killed run
    planned, the start of a query's first batch)."""
    if text is None or text.strip() in ("", "None", "null"):
        return None
    return from_json_offsets(json.loads(text))


def progress_line(
    topic: str,
    batch: int,
    records: int,
    total: int,
    start: Mapping[tuple[str, int], int],
    end: Mapping[tuple[str, int], int],
    latest: Mapping[tuple[str, int], int],
) -> str:
    """One committed batch: its offsets per partition (start-end; a partition new in this
    batch starts at its earliest offset, which the event does not say: "?"), and the lag."""
    ranges = " ".join(f"{p}:{start.get((t, p), '?')}-{end[t, p]}" for t, p in sorted(end))
    lag = sum(max(latest.get(tp, o) - o, 0) for tp, o in end.items())
    return (
        f"{topic}: batch {batch}: {records} records, offsets {ranges}, {total} this run, lag {lag}"
    )


# -- the Spark side -----------------------------------------------------------------------


def spark_session(master: str) -> SparkSession:
    from pyspark.sql import SparkSession

    from gregor.spark import register

    spark = (
        SparkSession.builder.master(master)
        .appName("gregor-etl")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )
    register(spark)
    return spark


def value_schema(spec: str) -> Any:
    """--schema: a file holding Spark DDL or a JSON schema (StructType.jsonValue())."""
    from pyspark.sql.types import StringType, StructField, StructType

    text = Path(spec).read_text().strip()
    if text.startswith("{"):
        schema = StructType.fromJson(json.loads(text))
    else:
        parsed = StructType.fromDDL(text)
        assert isinstance(parsed, StructType)
        schema = parsed
    return StructType([*schema.fields, StructField(CORRUPT, StringType())])


def topic_stream(
    spark: SparkSession, args: argparse.Namespace, topic: str, client: Mapping[str, str]
) -> DataFrame:
    """The topic as a stream, with the partition columns, for one query alone.

    Each query gets a registration of the source of its own. Spark's Python streaming
    source runner adds its worker's environment, in place, to the map of the registered
    data source function (PythonStreamingSourceRunner.init, Spark 4.x), and the tasks of
    every query over that registration carry the same map. Two queries whose runners start
    at once can corrupt it (a HashMap written by two threads), and every task that carries
    it then fails to deserialize (java.io.OptionalDataException): the likely cause of a
    rerun that failed so in CI in both queries.
    """
    from pyspark.sql import functions as F

    from gregor.spark import register

    register(spark)
    reader = spark.readStream.format("gregor").option("subscribe", topic)
    reader = reader.option("startingOffsets", "earliest").option("includeHeaders", "true")
    for key, value in client.items():
        reader = reader.option(f"kafka.{key}", value)
    if args.max_records_per_batch:
        reader = reader.option("maxOffsetsPerTrigger", str(args.max_records_per_batch))
    records = reader.load()
    parts = {
        "date": F.date_format("timestamp", "yyyy-MM-dd"),
        "hour": F.date_format("timestamp", "HH"),
    }
    for name in args.partition_by:
        records = records.withColumn(name, parts[name])
    return records


def start_queries(
    spark: SparkSession,
    args: argparse.Namespace,
    topic: str,
    client: Mapping[str, str],
) -> list[StreamingQuery]:
    from pyspark.sql import functions as F

    warehouse: Path = args.warehouse
    outputs: list[tuple[str, DataFrame, list[str]]] = []
    if args.value_format == "json":
        schema = value_schema(args.schema)
        fields = [f"_parsed.{f.name}" for f in schema.fields if f.name != CORRUPT]
        bad = F.col("value").isNotNull() & (
            F.col(f"_parsed.{CORRUPT}").isNotNull() | F.col("_parsed").isNull()
        )

        def parsed() -> DataFrame:
            return topic_stream(spark, args, topic, client).withColumn(
                "_parsed",
                F.from_json(
                    F.col("value").cast("string"),
                    schema,
                    {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT},
                ),
            )

        good = parsed().where(~bad)
        good = good.select(*[c for c in good.columns if c != "_parsed"], *fields)
        rejected = (
            parsed()
            .where(bad)
            .select(
                "topic",
                "partition",
                "offset",
                "timestamp",
                "value",
                F.lit(f"value is not JSON of the schema {args.schema}").alias("error"),
            )
        )
        outputs = [(topic, good, args.partition_by), (f"{REJECTED}/{topic}", rejected, [])]
    else:
        outputs = [(topic, topic_stream(spark, args, topic, client), args.partition_by)]
    queries = []
    for name, frame, partition_by in outputs:
        table = warehouse / name
        remove_uncommitted(table)
        writer = (
            frame.observe(OBSERVED, F.count(F.lit(1)).alias("rows"))
            .writeStream.format("parquet")
            .option("path", str(table))
            .option("checkpointLocation", str(warehouse / CHECKPOINTS / name))
            .queryName(name.replace("/", "_"))
        )
        if args.every:
            writer = writer.trigger(processingTime=f"{args.every} seconds")
        else:
            writer = writer.trigger(availableNow=True)
        if partition_by:
            writer = writer.partitionBy(*partition_by)
        queries.append(writer.start())
    return queries


def run(args: argparse.Namespace) -> int:
    client = client_options(args)
    stopping = threading.Event()
    if args.every is not None:
        # From the start: a service told to stop while Spark starts stops once it runs.
        stop_on_signals(stopping)
    group = Consumer({**client, "group.id": args.group, "enable.auto.commit": "false"})
    try:
        topics = topics_to_load(args, group)
        if not topics and args.every is None:
            log.info("no topics to load")
            return 0
        metrics = EtlMetrics(topics)
        with exporting(args, metrics):
            status = load(args, client, group, topics, metrics, stopping)
            if args.metrics_listener and args.metrics_linger > 0:
                linger(args.metrics_linger)
        return status
    finally:
        group.close(commit=False)


@contextlib.contextmanager
def exporting(args: argparse.Namespace, metrics: EtlMetrics) -> Iterator[None]:
    """The Prometheus exporter, with --metrics-listener, while the block runs."""
    with contextlib.ExitStack() as stack:
        if args.metrics_listener:
            try:
                host, port = stack.enter_context(
                    serving(args.metrics_listener, EtlCollector(metrics))
                )
            except OSError as exc:
                raise SystemExit(f"gregor-etl: --metrics-listener: cannot listen ({exc})") from None
            log.info(f"metrics for Prometheus on http://{host}:{port}/metrics")
        yield


def linger(seconds: float) -> None:
    """Serve the final figures a while longer: until `seconds` pass or SIGTERM/SIGINT."""
    log.info(f"serving the final metrics for {seconds:g} s")
    stop = {signal.SIGTERM, signal.SIGINT}
    signal.pthread_sigmask(signal.SIG_BLOCK, stop)
    try:
        signal.sigtimedwait(stop, seconds)
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, stop)


def load(
    args: argparse.Namespace,
    client: Mapping[str, str],
    group: Consumer,
    topics: list[str],
    metrics: EtlMetrics,
    stopping: threading.Event,
) -> int:
    from pyspark.sql.streaming.listener import StreamingQueryListener

    spark = spark_session(args.master)
    warehouse: Path = args.warehouse
    started = time.monotonic()
    totals: dict[str, int] = dict.fromkeys(topics, 0)

    seen: set[tuple[str, int]] = set()  # (query id, batch id) already handled
    seen_lock = threading.Lock()

    def handle(progress: Any) -> None:
        """One finished batch's progress, once: from the listener, or (for the events the
        listener bus had not delivered when the queries ended) from `recentProgress`."""
        with seen_lock:
            key = (str(progress.id), int(progress.batchId))
            if key in seen:
                return
            seen.add(key)
        name = progress.name or ""
        observed = progress.observedMetrics.get(OBSERVED)
        rows = int(observed["rows"]) if observed is not None else 0
        if name.startswith(REJECTED):
            metrics.rejected(name.removeprefix(REJECTED + "_"), rows)
            return
        for source in progress.sources:
            end = source_offsets(source.endOffset)
            if end is None:
                continue
            start = source_offsets(source.startOffset) or {}
            # None when the batch was planned by an earlier run: this run never
            # asked for the latest offsets, so ask the cluster.
            latest = source_offsets(source.latestOffset)
            if latest is None:
                ends = group.end_offsets([TopicPartition(*tp) for tp in end])
                latest = by_tp(ends)
            totals[name] = totals.get(name, 0) + progress.numInputRows
            commit_group(group, end)
            seconds = progress.durationMs.get("triggerExecution", 0) / 1000
            metrics.batch(
                name, progress.numInputRows, rows, seconds, time.time(),
                partitions(end), partitions(latest),
            )  # fmt: skip
            log.info(
                progress_line(
                    name, progress.batchId, progress.numInputRows, totals[name],
                    start, end, latest,
                )
            )  # fmt: skip

    class Progress(StreamingQueryListener):
        def onQueryStarted(self, event: Any) -> None:
            pass

        def onQueryProgress(self, event: Any) -> None:
            handle(event.progress)

        def onQueryIdle(self, event: Any) -> None:
            pass

        def onQueryTerminated(self, event: Any) -> None:
            pass

    listener = Progress()
    spark.streams.addListener(listener)
    failed: list[str] = []
    if args.every is None:
        failed, queries = run_once(spark, args, topics, client)
        # The listener bus is asynchronous: a query can end before its last batch's event
        # is delivered (a rerun of one batch often does), so what it missed comes from here.
        for query in queries:
            for progress in query.recentProgress:
                handle(progress)
    else:
        # Not `group`: the listener commits through that one, from Spark's thread.
        lister = Consumer(client) if args.pattern else None
        try:
            refresh = functools.partial(topics_to_load, args, lister) if lister else None
            topics = serve(spark, args, topics, client, refresh, stopping, metrics)
        finally:
            if lister is not None:
                lister.close()
    spark.streams.removeListener(listener)
    # The group's offsets follow the checkpoints, also when this run found nothing new
    # (a crash may have come between a batch and its group commit).
    for topic in topics:
        offsets = checkpoint_offsets(warehouse / CHECKPOINTS / topic) or {}
        if offsets:
            commit_group(group, offsets)
        ends = by_tp(group.end_offsets([TopicPartition(t, p) for t, p in offsets]))
        metrics.offsets(topic, partitions(offsets), partitions(ends))
        lag = sum(ends[tp] - o for tp, o in offsets.items())
        log.info(
            f"{topic}: {totals.get(topic, 0)} records loaded this run, lag {lag}, "
            f"table {warehouse / topic}"
        )
    log.info(f"done in {time.monotonic() - started:.1f} s")
    if failed:
        log.error("failed: " + "; ".join(failed))
        return 1
    spark.stop()
    return 0


def run_once(
    spark: SparkSession, args: argparse.Namespace, topics: list[str], client: Mapping[str, str]
) -> tuple[list[str], list[StreamingQuery]]:
    """Every topic's queries to the end of what it holds now; the queries that failed, and
    every query."""
    queries = [q for topic in topics for q in start_queries(spark, args, topic, client)]
    failed = []
    for query in queries:
        query.awaitTermination()
        if query.exception() is not None:
            failed.append(f"{query.name}: {query.exception()}")
    return failed, queries


def stop_on_signals(stopping: threading.Event) -> None:
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stopping.set())


def serve(
    spark: SparkSession,
    args: argparse.Namespace,
    topics: list[str],
    client: Mapping[str, str],
    refresh: Callable[[], list[str]] | None,
    stopping: threading.Event,
    metrics: EtlMetrics,
) -> list[str]:
    """The queries, a micro-batch every --every seconds, until SIGTERM or SIGINT set
    `stopping`; with `refresh` (--pattern), topics that appear are loaded too, looked for
    every REFRESH_TOPICS seconds. A topic whose query fails has its queries stopped and
    started again after RESTART_PAUSE (the rerun redoes what was not committed, as after a
    crash). Returns every topic it loaded."""
    stop_on_signals(stopping)  # again: PySpark's context set its own SIGINT handler
    running = {topic: start_queries(spark, args, topic, client) for topic in topics}
    log.info(f"serving {', '.join(topics) or 'no topic yet'}, a micro-batch every {args.every:g} s")
    next_refresh = time.monotonic() + REFRESH_TOPICS
    while not stopping.wait(0.5):
        if refresh is not None and time.monotonic() >= next_refresh:
            next_refresh = time.monotonic() + REFRESH_TOPICS
            try:
                found = refresh()
            except Exception as exc:  # the cluster unreachable: asked again later
                log.error(f"cannot list topics ({exc})")
                found = []
            for topic in found:
                if topic not in running:
                    log.info(f"loading {topic} too")
                    metrics.add(topic)
                    running[topic] = start_queries(spark, args, topic, client)
        for topic, queries in running.items():
            # Only a failure ends a query before it is stopped.
            ended = [q for q in queries if not q.isActive]
            if not ended or stopping.is_set():
                continue
            for query in queries:
                query.stop()
            why = "; ".join(f"{q.name}: {q.exception() or 'ended'}" for q in ended)
            log.error(f"{topic} failed: {why}; starting over in {RESTART_PAUSE} s")
            if not stopping.wait(RESTART_PAUSE):
                running[topic] = start_queries(spark, args, topic, client)
    for queries in running.values():
        for query in queries:
            query.stop()
    log.info("stopped")
    return list(running)


def partitions(offsets: Mapping[tuple[str, int], int]) -> dict[int, int]:
    """One query's offsets (a query reads one topic) by partition."""
    return {p: o for (_, p), o in offsets.items()}


def set_up_logging(log_format: str) -> None:
    """gregor-etl's own lines: `gregor-etl: ...` (errors on stderr), or with --log-format
    json one JSON object per line on stdout, as the broker's and the mirror's."""
    log.setLevel(logging.INFO)
    log.propagate = False  # Spark's py4j logging goes its own way
    if log_format == "json":
        out = logging.StreamHandler(sys.stdout)
        out.setFormatter(JsonFormatter())
        log.addHandler(out)
        return
    text = logging.Formatter("gregor-etl: %(message)s")
    out, err = logging.StreamHandler(sys.stdout), logging.StreamHandler(sys.stderr)
    out.addFilter(lambda record: record.levelno < logging.WARNING)
    err.setLevel(logging.WARNING)
    for handler in (out, err):
        handler.setFormatter(text)
        log.addHandler(handler)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    set_up_logging(args.log_format)
    sys.exit(run(args))


if __name__ == "__main__":
    main()
