"""gregor-broker: a Kafka-compatible broker with a ZooKeeper-based controller."""

from __future__ import annotations

__version__ = "0.1.0"
