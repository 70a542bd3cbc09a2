"""The producer: Producer (blocking) and AsyncProducer (trio and asyncio)."""

from gregor.client.producer.batch import RecordFuture
from gregor.client.producer.sync import Producer
from gregor.client.producer.transactions import TransactionAbortedError

__all__ = ["Producer", "RecordFuture", "TransactionAbortedError"]
