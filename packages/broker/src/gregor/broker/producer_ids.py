"""ProducerIds: the producer ids this broker hands out (InitProducerId).

Ids come in blocks of 1,000 claimed in ZooKeeper, as Kafka's ZooKeeper-mode broker claims
them: `/latest_producer_id_block` holds the last block claimed by any broker
(`{"version":1,"broker":..,"block_start":..,"block_end":..}`), and the next block is written
over it by a conditional set on the znode's version, so no two brokers get the same block.
A broker's ids are unique for the life of the cluster; ids unused at a restart are lost, as
in Kafka.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import trio

from gregor.broker.zk.znodes import ProducerIdBlock

log = logging.getLogger(__name__)

# Claims the next block for a broker id (KafkaZkClient.allocate_producer_id_block).
ClaimBlock = Callable[[int], Awaitable[ProducerIdBlock]]


class ProducerIds:
    def __init__(self, broker_id: int, claim_block: ClaimBlock) -> None:
        self.broker_id = broker_id
        self._claim_block = claim_block
        self._next = 0
        self._last = -1  # the last id of the current block: none yet
        self._lock = trio.Lock()

    async def next_id(self) -> int:
        """A producer id never handed out before; claims a new block when this one is used."""
        async with self._lock:
            if self._next > self._last:
                block = await self._claim_block(self.broker_id)
                self._next, self._last = block.first_producer_id, block.last_producer_id
            found = self._next
            self._next += 1
            return found
