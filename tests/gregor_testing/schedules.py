"""Randomized fault schedules for the nemesis (`nemesis.py`, where the kinds of fault are
described), and Jepsen's 2013 Kafka scenario.

A schedule (`schedule(seed, seconds, ...)`, the same for the same seed) is a list of
`Fault`s, each from `at` for `seconds`, several overlapping, over the ZooKeepers and
brokers of one datacenter and its controller. `service_schedule` draws the faults of the
services around it (the mirror copying from it, its ETL, the WAN) from the same seed,
apart: a seed's cluster faults are the same with or without them.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass

from gregor_testing.nemesis import CONTROLLER, Fault, Nemesis, wait_until

PROCESS_FAULTS = ("kill", "pause", "restart")
NETWORK_FAULTS = ("isolate", "split", "one_way")
BROKER_FAULTS = ("expire", "disk_full")  # on a broker (or the controller) only
KINDS = PROCESS_FAULTS + NETWORK_FAULTS + BROKER_FAULTS
LONG_FAULTS = ("pause", "expire")  # past the session timeout
PAUSE_AT_LEAST = 8.0  # seconds: past the brokers' zookeeper.session.timeout.ms (6 s)
# A service's faults, by its service: a mirror crashes, freezes and restarts cleanly; the
# ETL crashes (its driver with its JVM and workers), freezes, and loses its network.
SERVICE_FAULTS = {"mirror": ("kill", "pause", "restart"), "etl": ("kill", "pause", "isolate")}


def schedule(
    seed: int,
    seconds: float,
    hosts: list[str],
    faults: int = 3,
    kinds: tuple[str, ...] = (),
    brokers: list[str] | None = None,
) -> list[Fault]:
    """`faults` faults over the first 80% of `seconds` (the rest lets the cluster settle
    while the producers still send), among `hosts` (ZooKeepers and brokers) and the
    controller; the broker faults among `brokers` (by default, `hosts`)."""
    rng = random.Random(seed)
    kinds = kinds or KINDS
    planned: list[Fault] = []
    for _ in range(faults):
        kind = rng.choice(kinds)
        length = rng.uniform(PAUSE_AT_LEAST, 12) if kind in LONG_FAULTS else rng.uniform(3, 10)
        length = min(length, seconds * 0.8)
        at = rng.uniform(0, seconds * 0.8 - length)
        targets: tuple[str, ...]
        if kind in PROCESS_FAULTS:
            targets = (rng.choice([*hosts, CONTROLLER]),)
        elif kind in BROKER_FAULTS:
            targets = (rng.choice([*(brokers or hosts), CONTROLLER]),)
        elif kind == "split":
            targets = tuple(sorted(rng.sample(hosts, rng.randint(1, len(hosts) // 2))))
        elif kind == "one_way":
            targets = tuple(rng.sample(hosts, 2))
        else:
            targets = (rng.choice(hosts),)
        planned.append(Fault(at, length, kind, targets))
    return sorted(planned, key=lambda f: f.at)


def service_schedule(
    seed: int, seconds: float, services: Mapping[str, str], faults: int = 2, wan: bool = True
) -> list[Fault]:
    """`faults` faults over the first 80% of `seconds` on `services` (host -> its service,
    "mirror" or "etl") and, with `wan`, the WAN cut; each 3-10 s long. The ETL's start
    past 40% of the run: by then it loads the run's topic, a batch always under way."""
    rng = random.Random(f"services-{seed}")
    choices: list[tuple[str, tuple[str, ...]]] = [
        (kind, (host,)) for host, service in services.items() for kind in SERVICE_FAULTS[service]
    ]
    choices += [("wan", ())] * (len(services) if wan else 0)  # as likely as a service's
    planned = []
    for _ in range(faults):
        kind, hosts = rng.choice(choices)
        earliest = seconds * 0.4 if hosts and services[hosts[0]] == "etl" else 0.0
        length = min(rng.uniform(3, 10), seconds * 0.8 - earliest)
        planned.append(Fault(rng.uniform(earliest, seconds * 0.8 - length), length, kind, hosts))
    return sorted(planned, key=lambda f: f.at)


@dataclass(frozen=True)
class Jepsen2013:
    """What the 2013 scenario saw: the leader of the partition, its ISR when it was killed,
    and the partition's leader while it was dead and its followers reachable again."""

    leader: str
    isr_at_kill: list[int]
    leader_while_dead: int


def partition_state(nemesis: Nemesis, topic: str, partition: int) -> tuple[int, list[int]]:
    """(leader id, ISR) of a partition as the controller sees it (its cache is the first
    to know; a broker cut from it may lag), else the first broker that answers."""
    controller = nemesis.controller()
    for host in sorted(nemesis.brokers, key=lambda h: h != controller):
        if not nemesis.process(host).is_running():
            continue
        seen = nemesis.hosts.metadata(host)
        for t in seen.topics if seen is not None else []:
            for p in t.partitions if t.name == topic else []:
                if p.partition_index == partition:
                    return p.leader_id, sorted(p.isr_nodes)
    return -1, []


def jepsen_2013(nemesis: Nemesis, topic: str, partition: int = 0) -> Jepsen2013:
    """Jepsen's 2013 Kafka scenario: the partition's leader is cut from its followers (and
    only from them) until the ISR shrinks to the leader alone, then the leader dies. Kafka
    0.8 then elected a follower that lacked acknowledged records; here min.insync.replicas=2
    refuses writes the ISR of one would take, and with unclean election off no follower
    leads while the leader is dead, even once the network heals. Then the leader restarts."""
    leader_id, _ = partition_state(nemesis, topic, partition)
    leader = nemesis.hosts.broker_named(leader_id)
    followers = [h for h in nemesis.brokers if h != leader]
    nemesis.note(f"cut {leader} (leader of {topic}-{partition}) from {followers}")
    nemesis.network.partition([leader], followers)
    wait_until(
        lambda: partition_state(nemesis, topic, partition)[1] == [leader_id],
        60,
        f"the ISR of {topic}-{partition} to shrink to {leader}",
    )
    isr = partition_state(nemesis, topic, partition)[1]
    nemesis.note(f"kill {leader} with ISR {isr}")
    nemesis.process(leader).kill()
    nemesis.network.heal()
    nemesis.note("heal")
    # The controller sees the leader gone once its ZooKeeper session expires; with
    # unclean election off it leaves the partition without a leader.
    wait_until(
        lambda: partition_state(nemesis, topic, partition)[0] != leader_id,
        60,
        f"the controller to notice {leader} gone",
    )
    leader_while_dead = partition_state(nemesis, topic, partition)[0]
    nemesis.note(f"leader of {topic}-{partition} while {leader} is dead: {leader_while_dead}")
    nemesis.process(leader).launch()  # type: ignore[attr-defined]
    nemesis.note(f"restart {leader}")
    return Jepsen2013(leader, isr, leader_while_dead)
