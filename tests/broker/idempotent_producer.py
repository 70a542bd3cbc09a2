"""An idempotent producer of one client library, for tests/broker/test_idempotence.py.

    python idempotent_producer.py CLIENT BOOTSTRAP TOPIC

CLIENT is confluent-kafka, kafka-python, aiokafka or gregor-client. It produces
`<client> <n>` (n = 0, 1, 2, ...) to partition 0 of TOPIC with idempotence on, acks=all
and up to 5 requests in flight, a few hundred records a second, until its stdin closes;
then it waits for every outstanding record and exits. Each acknowledged record is printed
as `<offset> <value>`; a failed one as `FAILED <value> <error>`.
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from collections.abc import Callable

DELIVERY_TIMEOUT_MS = 300_000
BURST = 20  # records between pauses: several batches in flight, a steady pace


_output = threading.Lock()  # kafka-python calls back from its I/O thread too


def report(value: bytes, offset: int | None, error: object = None) -> None:
    if error is None:
        line = f"{offset} {value.decode()}\n"
    else:
        line = "FAILED {} {}\n".format(value.decode(), str(error).replace("\n", " "))
    with _output:
        sys.stdout.write(line)
        sys.stdout.flush()


def values(client: str, stop: threading.Event) -> Callable[[], bytes | None]:
    count = 0

    def next_value() -> bytes | None:
        nonlocal count
        if stop.is_set():
            return None
        if count and count % BURST == 0:
            time.sleep(0.05)
        count += 1
        return f"{client} {count - 1:09d}".encode()

    return next_value


def confluent(bootstrap: str, topic: str, next_value: Callable[[], bytes | None]) -> None:
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "max.in.flight.requests.per.connection": 5,
            "linger.ms": 5,
            "retry.backoff.ms": 100,
            "message.timeout.ms": DELIVERY_TIMEOUT_MS,
        }
    )

    def delivered(error: object, message: object) -> None:
        report(message.value(), message.offset(), error)  # type: ignore[attr-defined]

    while (value := next_value()) is not None:
        producer.produce(topic, value, partition=0, on_delivery=delivered)
        producer.poll(0)
    assert producer.flush(DELIVERY_TIMEOUT_MS / 1000) == 0


def kafka_python(bootstrap: str, topic: str, next_value: Callable[[], bytes | None]) -> None:
    from kafka import KafkaProducer

    # kafka-python 3 turns idempotence on by default: its defaults, and 5 in flight.
    producer = KafkaProducer(
        bootstrap_servers=bootstrap,
        max_in_flight_requests_per_connection=5,
        linger_ms=5,
        delivery_timeout_ms=DELIVERY_TIMEOUT_MS,
        request_timeout_ms=20_000,
    )
    while (value := next_value()) is not None:
        future = producer.send(topic, value, partition=0)
        future.add_callback(lambda meta, v=value: report(v, meta.offset))
        future.add_errback(lambda exc, v=value: report(v, None, exc))
    producer.flush(DELIVERY_TIMEOUT_MS / 1000)
    producer.close()


def aiokafka(bootstrap: str, topic: str, next_value: Callable[[], bytes | None]) -> None:
    from aiokafka import AIOKafkaProducer

    async def run() -> None:
        producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap,
            enable_idempotence=True,
            linger_ms=5,
            request_timeout_ms=20_000,
        )
        await producer.start()
        pending = []
        try:
            while (value := next_value()) is not None:
                sent = await producer.send(topic, value, partition=0)
                sent.add_done_callback(
                    lambda f, v=value: report(
                        v, None if f.exception() else f.result().offset, f.exception()
                    )
                )
                pending.append(sent)
                await asyncio.sleep(0)
            await asyncio.gather(*pending, return_exceptions=True)
        finally:
            await producer.stop()

    asyncio.run(run())


def gregor(bootstrap: str, topic: str, next_value: Callable[[], bytes | None]) -> None:
    from gregor.client import Producer

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "max.in.flight.requests.per.connection": 5,
            "linger.ms": 5,
            "delivery.timeout.ms": DELIVERY_TIMEOUT_MS,
        }
    )
    while (value := next_value()) is not None:
        producer.produce(
            topic,
            value,
            partition=0,
            on_delivery=lambda error, meta, v=value: report(
                v, None if error else meta.offset, error
            ),
        )
        producer.poll(0)
    producer.flush(DELIVERY_TIMEOUT_MS / 1000)
    producer.close()


CLIENTS = {
    "confluent-kafka": confluent,
    "kafka-python": kafka_python,
    "aiokafka": aiokafka,
    "gregor-client": gregor,
}


def main() -> None:
    client, bootstrap, topic = sys.argv[1:4]
    stop = threading.Event()

    def wait_for_stdin() -> None:
        sys.stdin.read()
        stop.set()

    threading.Thread(target=wait_for_stdin, daemon=True).start()
    CLIENTS[client](bootstrap, topic, values(client, stop))


if __name__ == "__main__":
    main()
