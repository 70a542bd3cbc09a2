"""The transaction coordinator: transactional ids, their producer ids and epochs, and the
two-phase commit of their transactions, kept in `__transaction_state`.

- `coordinator`: the protocol, request by request, with Kafka's errors (InitProducerId with
  a transactional id, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, the admin views), and
  the timeouts;
- `state`: a transactional id's metadata and the rules of every transition;
- `manager`: the ids of the `__transaction_state` partitions led here, loading and
  unloading them, writes;
- `records`: the state as `__transaction_state` records and back;
- `markers`: WriteTxnMarkers to the partition leaders, with retries;
- `channel`: the markers' transport on the broker's inter-broker connections.

It is given narrow interfaces (a `TopicLog`, a marker transport, a producer-id allocator),
never the broker.
"""

from __future__ import annotations

from gregor.broker.coordinator.transaction.channel import InterBrokerMarkerTransport
from gregor.broker.coordinator.transaction.config import TransactionConfig
from gregor.broker.coordinator.transaction.coordinator import (
    InitResult,
    ProducerIdAllocator,
    TransactionCoordinator,
)
from gregor.broker.coordinator.transaction.manager import TransactionStateManager
from gregor.broker.coordinator.transaction.markers import MarkerTransport, TxnMarkerChannel
from gregor.broker.coordinator.transaction.state import TxnState

__all__ = [
    "InitResult",
    "InterBrokerMarkerTransport",
    "MarkerTransport",
    "ProducerIdAllocator",
    "TransactionConfig",
    "TransactionCoordinator",
    "TransactionStateManager",
    "TxnMarkerChannel",
    "TxnState",
]
