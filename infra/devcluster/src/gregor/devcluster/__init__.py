"""The one launcher of local Gregor processes: ZooKeeper and gregor-broker, for the local
cluster (`nox -s cluster`), the tests' fixtures and the benchmarks.

Everything listens on 127.0.0.1 (or a given host) and on ports chosen at run time unless
told otherwise. Brokers are started as an operator starts them: a `server.properties` file
and the `gregor-broker` command; this package never imports the broker.
"""

from gregor.devcluster.admin import create_topic
from gregor.devcluster.broker import BrokerProcess
from gregor.devcluster.cluster import LocalCluster
from gregor.devcluster.ports import LOOPBACK, free_port
from gregor.devcluster.supervisor import Supervised, wait_until
from gregor.devcluster.wire import api_versions, send_request
from gregor.devcluster.zookeeper import ZooKeeper, four_letter_word

__all__ = [
    "LOOPBACK",
    "BrokerProcess",
    "LocalCluster",
    "Supervised",
    "ZooKeeper",
    "api_versions",
    "create_topic",
    "four_letter_word",
    "free_port",
    "send_request",
    "wait_until",
]
