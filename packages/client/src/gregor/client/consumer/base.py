"""What Consumer and AsyncConsumer share: the calls that only change local state."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from gregor.client.config import ConsumerConfig
from gregor.client.consumer.core import ConsumerCore, split_callbacks
from gregor.client.consumer.subscription import ResetStrategy
from gregor.client.types import ConsumerGroupMetadata, TopicPartition


class ConsumerBase:
    def __init__(self, config: Mapping[str, Any]) -> None:
        self.config = ConsumerConfig.from_dict(config)
        self._core = ConsumerCore(self.config)
        self._closed = False

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.config.client_id}>"

    def subscribe(
        self,
        topics: Iterable[str] | str | re.Pattern[str],
        listener: object | None = None,
        *,
        on_assign: Callable[..., Any] | None = None,
        on_revoke: Callable[..., Any] | None = None,
        on_lost: Callable[..., Any] | None = None,
    ) -> None:
        """Join the group for these topics (or a compiled pattern). The listener's
        on_assign / on_revoke / on_lost(consumer, partitions) are called while polling."""
        self._core.subscribe(topics, split_callbacks(listener, on_assign, on_revoke, on_lost))

    def assign(self, partitions: Iterable[TopicPartition | tuple[str, int]]) -> None:
        """Read exactly these partitions, without group management."""
        self._core.assign(TopicPartition(*tp) for tp in partitions)

    def group_metadata(self) -> ConsumerGroupMetadata:
        """This member's group, generation and member id, for a transactional producer's
        send_offsets_to_transaction (which the coordinator refuses for a stale generation)."""
        return self._core.group_metadata()

    def assignment(self) -> list[TopicPartition]:
        return sorted(self._core.subscriptions.assigned())

    def subscription(self) -> set[str]:
        return set(self._core.subscriptions.topics)

    def seek(self, partition: TopicPartition | tuple[str, int], offset: int) -> None:
        self._core.seek(TopicPartition(*partition), offset)

    def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        """To the first offset of these partitions (of every assigned one, without any)."""
        self._core.seek_to(partitions, ResetStrategy.EARLIEST)

    def seek_to_end(self, *partitions: TopicPartition) -> None:
        self._core.seek_to(partitions, ResetStrategy.LATEST)

    def pause(self, *partitions: TopicPartition) -> None:
        self._core.pause(partitions)

    def resume(self, *partitions: TopicPartition) -> None:
        self._core.resume(partitions)

    def paused(self) -> set[TopicPartition]:
        return self._core.subscriptions.paused()
