"""The consumer: Consumer (blocking) and AsyncConsumer (trio and asyncio)."""

from gregor.client.consumer.records import ConsumerRecord
from gregor.client.consumer.sync import Consumer

__all__ = ["Consumer", "ConsumerRecord"]
