"""A confluent-kafka transactional producer for tests that need committed, aborted and
open transactions on one partition."""

from __future__ import annotations

import confluent_kafka

from gregor.devcluster import LocalCluster
from gregor_testing.cluster import unique_topic


def values(prefix: str, count: int) -> list[bytes]:
    """`count` distinct values: prefix0, prefix1, ..."""
    return [b"%s%d" % (prefix.encode(), i) for i in range(count)]


class Transactions:
    """Writes partition 0 of `topic` in transactions, each committed, aborted or left open."""

    def __init__(self, cluster: LocalCluster, topic: str) -> None:
        self.topic = topic
        self.producer = confluent_kafka.Producer(
            {
                "bootstrap.servers": cluster.bootstrap_servers,
                "transactional.id": unique_topic("txn"),
                "linger.ms": 5,
            }
        )
        self.producer.init_transactions(60)

    def write(self, records: list[bytes], end: str | None) -> list[bytes]:
        """One transaction of `records`, then "commit", "abort", or None to leave it open;
        returns the records."""
        self.producer.begin_transaction()
        for value in records:
            self.producer.produce(self.topic, value, partition=0)
        assert self.producer.flush(60) == 0
        if end == "commit":
            self.producer.commit_transaction(60)
        elif end == "abort":
            self.producer.abort_transaction(60)
        return records
