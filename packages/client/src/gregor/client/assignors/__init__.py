"""Partition assignors: range, roundrobin, sticky and cooperative-sticky, or your own."""

from __future__ import annotations

from typing import Any

from gregor.client.assignors.base import (
    Assignment,
    Assignor,
    MemberSubscription,
    RebalanceProtocol,
    TopicLayout,
)
from gregor.client.assignors.range import RangeAssignor
from gregor.client.assignors.roundrobin import RoundRobinAssignor
from gregor.client.assignors.sticky import CooperativeStickyAssignor, StickyAssignor

BUILT_IN: dict[str, type[Assignor]] = {
    cls.name: cls
    for cls in (RangeAssignor, RoundRobinAssignor, StickyAssignor, CooperativeStickyAssignor)
}


def assignor_for(spec: Any) -> Assignor:
    """An assignor from a partition.assignment.strategy entry: a built-in's name, an
    Assignor subclass, or an instance."""
    if isinstance(spec, str):
        return BUILT_IN[spec]()
    if isinstance(spec, type) and issubclass(spec, Assignor):
        return spec()
    if isinstance(spec, Assignor):
        return spec
    raise TypeError(f"not an assignor: {spec!r}")


__all__ = [
    "BUILT_IN",
    "Assignment",
    "Assignor",
    "CooperativeStickyAssignor",
    "MemberSubscription",
    "RangeAssignor",
    "RebalanceProtocol",
    "RoundRobinAssignor",
    "StickyAssignor",
    "TopicLayout",
    "assignor_for",
]
