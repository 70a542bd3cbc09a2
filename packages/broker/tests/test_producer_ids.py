"""ProducerIds: ids handed out one by one from the blocks it claims, a new block only when
the last is used up, and concurrent callers never given the same id."""

from __future__ import annotations

import trio
import trio.testing

from gregor.broker.producer_ids import ProducerIds
from gregor.broker.zk.znodes import ProducerIdBlock


class Blocks:
    """Blocks of 3 ids, one after the other, as /latest_producer_id_block hands them out."""

    def __init__(self) -> None:
        self.claimed: list[ProducerIdBlock] = []

    async def claim(self, broker_id: int) -> ProducerIdBlock:
        await trio.sleep(0.01)  # a ZooKeeper round trip: others may ask meanwhile
        start = self.claimed[-1].next_block_first_id if self.claimed else 0
        self.claimed.append(ProducerIdBlock(broker_id, start, 3))
        return self.claimed[-1]


async def test_ids_are_taken_in_order_from_claimed_blocks() -> None:
    blocks = Blocks()
    ids = ProducerIds(7, blocks.claim)
    assert [await ids.next_id() for _ in range(7)] == list(range(7))
    assert [(b.broker_id, b.first_producer_id) for b in blocks.claimed] == [(7, 0), (7, 3), (7, 6)]


async def test_concurrent_callers_get_distinct_ids(autojump_clock: trio.testing.MockClock) -> None:
    blocks = Blocks()
    ids = ProducerIds(1, blocks.claim)
    got: list[int] = []

    async def take() -> None:
        got.append(await ids.next_id())

    async with trio.open_nursery() as nursery:
        for _ in range(10):
            nursery.start_soon(take)
    assert sorted(got) == list(range(10))
    assert len(blocks.claimed) == 4
