"""Record batch throughput: gregor-protocol against kafka-python and aiokafka, in one run.

Encodes batches of records with 100-byte values, and decodes them iterating each record's
offset and value, with:

- gregor-protocol, as installed (the C record decoder when it was built) and pure Python;
- kafka-python's record code (pure Python);
- aiokafka's, with its C extension and with its pure-Python classes (AIOKAFKA_NO_EXTENSIONS=1,
  which aiokafka reads at import, so that variant runs in a subprocess).

Prints records/s and the ratios against the baselines. Targets: gregor ≥ 2x kafka-python,
≥ aiokafka's pure-Python path, and ≥ 1,000,000 records/s iterating a decoded batch.

    python bench/bench_protocol.py [--records N] [--rounds R] [--seconds S] [--codec C]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

VALUE = b"v" * 100
BASE_TIMESTAMP = 1_700_000_000_000
CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


class Implementation:
    """How one library builds a batch and iterates a decoded one."""

    def __init__(
        self, name: str, build: Callable[[int, int], bytes], iterate: Callable[[bytes], int]
    ):
        self.name = name
        self.build = build
        self.iterate = iterate


def gregor(pure_python: bool) -> Implementation:
    from gregor.protocol import records

    # The decoder and record encoder records.py picks at import (C when built), or the
    # pure-Python ones.
    native = records._decode_records_c or records._decode_records_py
    decoder = records._decode_records_py if pure_python else native
    encoder = None if pure_python else records._append_record

    def build(count: int, codec: int) -> bytes:
        records._append_record = encoder
        builder = records.BatchBuilder(records.Compression(codec))
        append = builder.append
        for i in range(count):
            append(VALUE, timestamp=BASE_TIMESTAMP + i)
        return builder.build()

    def iterate(data: bytes) -> int:
        records._decode_records = decoder
        total = 0
        for record in records.RecordBatch.from_bytes(data):
            total += record.offset
            _ = record.value
        return total

    name = "gregor pure Python" if pure_python else "gregor"
    if not pure_python and (records._decode_records_c is None or encoder is None):
        name += " (no C extension)"
    return Implementation(name, build, iterate)


def their(name: str, builder_cls: Any, batch_cls: Any) -> Implementation:
    def build(count: int, codec: int) -> bytes:
        builder = builder_cls(2, codec, 0, -1, -1, -1, 1 << 30)
        append = builder.append
        for i in range(count):
            append(i, BASE_TIMESTAMP + i, None, VALUE, [])
        return bytes(builder.build())

    def iterate(data: bytes) -> int:
        total = 0
        for record in batch_cls(data):
            total += record.offset
            _ = record.value
        return total

    return Implementation(name, build, iterate)


def kafka_python() -> Implementation:
    from kafka.record import default_records as m

    return their("kafka-python", m.DefaultRecordBatchBuilder, m.DefaultRecordBatch)


def aiokafka() -> Implementation:
    from aiokafka.record import default_records as m

    pure = bool(os.environ.get("AIOKAFKA_NO_EXTENSIONS"))
    name = "aiokafka pure Python" if pure else "aiokafka C"
    return their(name, m.DefaultRecordBatchBuilder, m.DefaultRecordBatch)


def rate(action: Callable[[], object], records: int, seconds: float) -> float:
    """Records per second: the best of repeated runs filling about `seconds`."""
    best = float("inf")
    deadline = time.perf_counter() + seconds
    runs = 0
    while runs < 3 or time.perf_counter() < deadline:
        start = time.perf_counter()
        action()
        best = min(best, time.perf_counter() - start)
        runs += 1
    return records / best


def measure(impl: Implementation, count: int, codec: int, seconds: float) -> dict[str, float]:
    gc.collect()  # no garbage of the previous measurement collected during this one
    data = impl.build(count, codec)
    assert impl.iterate(data) == count * (count - 1) // 2  # every offset came back
    return {
        "encode": rate(lambda: impl.build(count, codec), count, seconds),
        "decode": rate(lambda: impl.iterate(data), count, seconds),
    }


class Worker:
    """An implementation measured in a subprocess (for environment variables read at
    import), driven line by line so that its rounds interleave with the others'."""

    def __init__(self, which: str, env: dict[str, str], args: argparse.Namespace) -> None:
        command = [sys.executable, __file__, "--worker", which]
        command += ["--records", str(args.records), "--codec", args.codec]
        self.process = subprocess.Popen(
            command,
            env={**os.environ, **env},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.name = self.ask({"seconds": 0})["name"]

    def ask(self, request: dict[str, float]) -> dict[str, Any]:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        answer: dict[str, Any] = json.loads(self.process.stdout.readline())
        return answer

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(timeout=30)


def serve_worker(which: str, count: int, codec: int) -> None:
    impl = FACTORIES[which]()
    for line in sys.stdin:
        seconds = json.loads(line)["seconds"]
        result = measure(impl, count, codec, seconds) if seconds else {}
        print(json.dumps({"name": impl.name, **result}), flush=True)


FACTORIES: dict[str, Callable[[], Implementation]] = {
    "gregor": lambda: gregor(pure_python=False),
    "gregor-py": lambda: gregor(pure_python=True),
    "kafka-python": kafka_python,
    "aiokafka": aiokafka,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=2000, help="records per batch")
    parser.add_argument("--rounds", type=int, default=7, help="interleaved rounds (best kept)")
    parser.add_argument("--seconds", type=float, default=0.3, help="per measurement")
    parser.add_argument("--codec", choices=sorted(CODECS), default="none")
    parser.add_argument("--worker", choices=sorted(FACTORIES), help=argparse.SUPPRESS)
    args = parser.parse_args()
    codec = CODECS[args.codec]
    if args.worker:
        serve_worker(args.worker, args.records, codec)
        return

    # The machine may be shared: every round measures every implementation once, in
    # turn, and each keeps its best round, so a busy moment does not favour anyone.
    local = [FACTORIES[w]() for w in ("gregor", "gregor-py", "kafka-python", "aiokafka")]
    worker = Worker("aiokafka", {"AIOKAFKA_NO_EXTENSIONS": "1"}, args)
    best: dict[str, dict[str, float]] = {}
    try:
        for _ in range(args.rounds):
            for impl in local:
                keep_best(best, impl.name, measure(impl, args.records, codec, args.seconds))
            answer = worker.ask({"seconds": args.seconds})
            keep_best(best, answer.pop("name"), answer)
    finally:
        worker.close()
    report([{"name": name, **rates} for name, rates in best.items()], args)


def keep_best(best: dict[str, dict[str, float]], name: str, rates: dict[str, float]) -> None:
    kept = best.setdefault(name, rates)
    for key, value in rates.items():
        kept[key] = max(kept[key], value)


def report(results: list[dict[str, Any]], args: argparse.Namespace) -> None:
    by_name = {r["name"]: r for r in results}
    baselines = [by_name["kafka-python"], by_name["aiokafka pure Python"]]
    print(
        f"record batches: {args.records} records of 100-byte values, codec {args.codec}, "
        f"Python {sys.version.split()[0]}"
    )
    header = f"{'':24}{'encode rec/s':>14}{'decode rec/s':>14}"
    for base in baselines:
        header += f"{'vs ' + base['name']:>28}"
    print(header)
    for r in results:
        line = f"{r['name']:24}{r['encode']:>14,.0f}{r['decode']:>14,.0f}"
        for base in baselines:
            ratios = f"{r['encode'] / base['encode']:.2f}x / {r['decode'] / base['decode']:.2f}x"
            line += f"{ratios:>28}"
        print(line)
    print("(ratios: encode / decode; decode = from bytes, iterating offset and value)")
    ours = results[0]
    kp, aio_py = baselines
    checks = [
        ("encode >= 2x kafka-python", ours["encode"] >= 2 * kp["encode"]),
        ("decode >= 2x kafka-python", ours["decode"] >= 2 * kp["decode"]),
        ("encode >= aiokafka pure Python", ours["encode"] >= aio_py["encode"]),
        ("decode >= aiokafka pure Python", ours["decode"] >= aio_py["decode"]),
        ("decode >= 1,000,000 records/s", ours["decode"] >= 1_000_000),
    ]
    for text, ok in checks:
        print(f"  [{'met' if ok else 'MISSED'}] {ours['name']}: {text}")


if __name__ == "__main__":
    main()
