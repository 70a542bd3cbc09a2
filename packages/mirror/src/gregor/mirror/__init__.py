"""gregor-mirror: replicate topics, consumer group offsets and topic configs between Kafka
clusters (Gregor or Apache Kafka), with MirrorMaker 2's configuration, topic names and
record formats, on gregor-client's async API.

    gregor-mirror mm2.properties --clusters B

    from gregor.mirror import translate_offsets
    offsets = await translate_offsets({"bootstrap.servers": "b:9092"}, "A", "billing")
"""

from gregor.mirror.checkpoints import Checkpoint
from gregor.mirror.config import MirrorConfig, MirrorConfigError, load
from gregor.mirror.heartbeats import Heartbeat
from gregor.mirror.offset_sync import OffsetSync
from gregor.mirror.policy import DefaultReplicationPolicy, IdentityReplicationPolicy
from gregor.mirror.runner import Mirror
from gregor.mirror.translate import translate, translate_offsets

__all__ = [
    "Checkpoint",
    "DefaultReplicationPolicy",
    "Heartbeat",
    "IdentityReplicationPolicy",
    "Mirror",
    "MirrorConfig",
    "MirrorConfigError",
    "OffsetSync",
    "load",
    "translate",
    "translate_offsets",
]
