"""The round-robin assignor: every partition of every subscribed topic, in order, dealt to
the members in turn, skipping members not subscribed to the partition's topic."""

from __future__ import annotations

from collections.abc import Mapping

from gregor.client.assignors.base import (
    Assignment,
    Assignor,
    MemberSubscription,
    TopicLayout,
    sorted_members,
    subscribed_topics,
)
from gregor.client.types import TopicPartition


class RoundRobinAssignor(Assignor):
    name = "roundrobin"

    def assign(self, topics: TopicLayout, members: Mapping[str, MemberSubscription]) -> Assignment:
        order = sorted_members(members)
        assignment: Assignment = {m: [] for m in order}
        if not order:
            return assignment
        turn = 0
        for topic in subscribed_topics(topics, members):
            for partition in range(len(topics[topic])):
                while topic not in members[order[turn]].topics:
                    turn = (turn + 1) % len(order)
                assignment[order[turn]].append(TopicPartition(topic, partition))
                turn = (turn + 1) % len(order)
        return assignment
