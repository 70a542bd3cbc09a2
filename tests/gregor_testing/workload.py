"""The workload of a Jepsen-style run, as a program on a client host of the topology (run
inside its namespace, `python workload.py create|produce|read ...`), writing its history
(`gregor_testing.history`).

- create: the topic, RF=3, min.insync.replicas=2, unclean leader election off;
- produce: idempotent producers with acks=all send keyed records at a steady pace for a
  while, then wait for every outcome (acknowledged or failed);
- read: one consumer reads every partition from the start to its high watermark (with
  --committed, read_committed to the end it reports, past the high watermark first seen:
  an exactly-once mirror's copy ends with a transaction marker, never read);
- ends: print the topic's high watermarks as JSON ({} while it does not exist).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).parents[1]))
from gregor_testing.history import History

KEYS = 12
MESSAGE_TIMEOUT_MS = 30_000  # each record's outcome comes within this


def create(args: argparse.Namespace) -> None:
    admin = AdminClient({"bootstrap.servers": args.bootstrap})
    config = {"min.insync.replicas": "2", "unclean.leader.election.enable": "false"}
    topic = NewTopic(args.topic, args.partitions, 3, config=config)
    admin.create_topics([topic])[args.topic].result(60)


class Sender:
    """One idempotent producer; replaced by a fresh one (a new name) after a fatal error."""

    def __init__(self, args: argparse.Namespace, history: History, name: str) -> None:
        self.name, self.history, self.sequence, self.fatal = name, history, 0, False
        self.producer = Producer(
            {
                "bootstrap.servers": args.bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 5,
                "message.timeout.ms": MESSAGE_TIMEOUT_MS,
                # idempotence's own account (retries, epoch bumps, duplicates), on stderr,
                # which a fault run keeps beside the history (`evidence`)
                "debug": "eos",
            }
        )

    def send(self, topic: str, key: str) -> None:
        record_id = f"{self.name}:{self.sequence}"
        self.sequence += 1
        self.history.write("send", id=record_id, key=key, producer=self.name)

        def report(err: KafkaError | None, msg: Message) -> None:
            if err is None:
                self.history.write(
                    "ack", id=record_id, partition=msg.partition(), offset=msg.offset()
                )
            else:
                self.fatal = self.fatal or err.fatal()
                self.history.write("error", id=record_id, error=err.name(), fatal=err.fatal())

        self.producer.produce(topic, key=key.encode(), value=record_id.encode(), on_delivery=report)


def produce(args: argparse.Namespace) -> None:
    history = History(args.history)
    senders = [Sender(args, history, f"p{i}") for i in range(args.producers)]
    generations = 0
    end = time.monotonic() + args.seconds
    count = 0
    while time.monotonic() < end:
        for i, sender in enumerate(senders):
            if sender.fatal:  # unusable; its records' outcomes are in the history
                sender.producer.flush(1)
                generations += 1
                senders[i] = sender = Sender(args, history, f"p{i}g{generations}")
            try:
                sender.send(args.topic, f"k{count % KEYS}")
            except BufferError:
                pass  # the local queue is full (brokers unreachable): nothing was sent
            count += 1
            sender.producer.poll(0)
        time.sleep(1 / args.rate)
    for sender in senders:
        left = sender.producer.flush(MESSAGE_TIMEOUT_MS / 1000 + 30)
        if left:
            history.write("unresolved", producer=sender.name, count=left)
    history.close()


def read(args: argparse.Namespace) -> None:
    history = History(args.history)
    consumer = Consumer(
        {
            "bootstrap.servers": args.bootstrap,
            "group.id": f"{args.topic}-reader",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed" if args.committed else "read_uncommitted",
            "enable.partition.eof": args.committed,
        }
    )
    partitions = consumer.list_topics(args.topic, timeout=30).topics[args.topic].partitions
    ends = {
        p: consumer.get_watermark_offsets(TopicPartition(args.topic, p), 30)[1] for p in partitions
    }
    consumer.assign([TopicPartition(args.topic, p, 0) for p in partitions])
    left = {p for p, high in ends.items() if high > 0}
    deadline = time.monotonic() + 120
    while left and time.monotonic() < deadline:
        for msg in consumer.consume(500, 1.0):
            if msg.error() and msg.error().code() == KafkaError._PARTITION_EOF:
                if msg.offset() >= ends[msg.partition()]:
                    left.discard(msg.partition())
                continue
            if msg.error():
                history.write("read-error", error=msg.error().name())
                continue
            partition, offset = msg.partition(), msg.offset()
            history.write("read", id=msg.value().decode(), partition=partition, offset=offset)
            if offset + 1 >= ends[partition]:
                left.discard(partition)
    if left:
        history.write("read-incomplete", partitions=sorted(left))
    consumer.close()
    history.close()


def ends(args: argparse.Namespace) -> None:
    consumer = Consumer({"bootstrap.servers": args.bootstrap, "group.id": f"{args.topic}-ends"})
    topic = consumer.list_topics(args.topic, timeout=30).topics[args.topic]
    partitions = [] if topic.error is not None else list(topic.partitions)
    highs = {
        p: consumer.get_watermark_offsets(TopicPartition(args.topic, p), 30)[1] for p in partitions
    }
    consumer.close()
    print(json.dumps(highs))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("command", choices=["create", "produce", "read", "ends"])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--history", type=Path)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--producers", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--rate", type=float, default=100, help="rounds of sends a second")
    parser.add_argument("--committed", action="store_true", help="read: read_committed")
    args = parser.parse_args()
    commands = {"create": create, "produce": produce, "read": read, "ends": ends}
    commands[args.command](args)


if __name__ == "__main__":
    main()
