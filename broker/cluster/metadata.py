"""Cluster metadata as the brokers see it: live brokers, the controller, each partition's state.

A ``PartitionState`` is Kafka's LeaderAndIsr plus the replica assignment. Its
``version`` is the etcd mod revision of its key (0 for a standalone broker):
every change is a compare-and-swap against it, so a writer that read an older
state -- a deposed leader shrinking its ISR -- cannot overwrite a newer one.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field, replace

NO_LEADER = -1
KEPT_ANSWERS = 64  # encoded Metadata answers kept, for as many (version, listener, topic set, flags)


class InvalidReplicationFactor(ValueError):
    pass


class InvalidReplicaAssignment(ValueError):
    pass


class TopicChangeInProgress(Exception):
    """Another request (on any broker) is creating the topic or partitions of it: retriable."""


@dataclass(frozen=True)
class BrokerInfo:
    node_id: int
    host: str  # inter.broker.listener.name's advertised address: where other brokers fetch from
    port: int
    rack: str | None = None
    endpoints: dict = field(default_factory=dict, compare=False)  # listener name -> (host, port)

    def endpoint(self, listener: str | None) -> tuple[str, int]:
        """Where a client of ``listener`` reaches this broker (as Kafka answers per listener name)."""
        host, port = self.endpoints.get(listener, (self.host, self.port))
        return host, int(port)

    def encode(self) -> bytes:
        return json.dumps({"node_id": self.node_id, "host": self.host, "port": self.port, "rack": self.rack,
                           "endpoints": self.endpoints}).encode()

    @classmethod
    def decode(cls, raw: bytes) -> "BrokerInfo":
        d = json.loads(raw)
        return cls(int(d["node_id"]), d["host"], int(d["port"]), d.get("rack"),
                   {name: tuple(ep) for name, ep in d.get("endpoints", {}).items()})


@dataclass(frozen=True)
class PartitionState:
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    replicas: tuple[int, ...]
    version: int = 0  # etcd mod revision of the key this was read from
    # the unclean election that made this leader, for its log line (Kafka logs it at the controller)
    unclean: bool = False
    # a reassignment under way (KIP-455): replicas holds both sets until every adding one is in sync
    adding: tuple[int, ...] = ()
    removing: tuple[int, ...] = ()

    def encode(self) -> bytes:
        return json.dumps({"leader": self.leader, "leader_epoch": self.leader_epoch, "isr": list(self.isr),
                           "replicas": list(self.replicas), "unclean": self.unclean,
                           "adding": list(self.adding), "removing": list(self.removing)}).encode()

    @classmethod
    def decode(cls, raw: bytes, version: int) -> "PartitionState":
        d = json.loads(raw)
        return cls(int(d["leader"]), int(d["leader_epoch"]), tuple(d["isr"]), tuple(d["replicas"]), version,
                   bool(d.get("unclean", False)), tuple(d.get("adding", ())), tuple(d.get("removing", ())))

    def reassigned(self, target: list[int]) -> "PartitionState":
        """Start moving to ``target``: the new replicas join (out of sync) until they catch up."""
        replicas = tuple(target) + tuple(r for r in self.replicas if r not in target)
        return replace(self, replicas=replicas, adding=tuple(r for r in target if r not in self.replicas),
                       removing=tuple(r for r in self.replicas if r not in target))

    def reassignment_done(self) -> "PartitionState | None":
        """Once every adding replica is in sync: the target replicas alone (a new leader if the old one goes)."""
        if not (self.adding or self.removing) or any(r not in self.isr for r in self.adding):
            return None
        target = tuple(r for r in self.replicas if r not in self.removing)
        isr = tuple(r for r in self.isr if r in target)
        done = replace(self, replicas=target, isr=isr, adding=(), removing=())
        if self.leader in target:
            return done
        return done.with_leader(isr[0] if isr else NO_LEADER, isr)

    def reassignment_cancelled(self) -> "PartitionState":
        original = tuple(r for r in self.replicas if r not in self.adding)
        isr = tuple(r for r in self.isr if r in original)
        back = replace(self, replicas=original, isr=isr, adding=(), removing=())
        return back if self.leader in original else back.with_leader(isr[0] if isr else NO_LEADER, isr)

    def with_isr(self, isr) -> "PartitionState":
        return replace(self, isr=tuple(isr), unclean=False)

    def with_leader(self, leader: int, isr, unclean: bool = False) -> "PartitionState":
        """A new leader (or none) bumps the leader epoch, so the old leader's fetches and writes are fenced."""
        return replace(self, leader=leader, leader_epoch=self.leader_epoch + 1, isr=tuple(isr), unclean=unclean)


class _Revised(dict):
    """The partition states: each change counts one revision of its owner (a dict replaced whole too)."""

    __slots__ = ("owner",)

    def __init__(self, owner: "MetadataCache", items=()) -> None:
        super().__init__(items)
        self.owner = owner

    def _changed(self) -> None:
        self.owner.revision += 1


def _revising(method):
    def changing(self, *args, **kwargs):
        self._changed()
        return method(self, *args, **kwargs)
    return changing


for _name in ("__setitem__", "__delitem__", "pop", "popitem", "clear", "update", "setdefault", "__ior__"):
    setattr(_Revised, _name, _revising(getattr(dict, _name)))


class MetadataCache:
    """What this broker knows of the cluster; the store keeps it current. ``revision`` counts the changes of
    the partition states, so what is derived from them (encoded Metadata answers) knows when it is stale."""

    def __init__(self, brokers: dict[int, BrokerInfo] | None = None, controller_id: int = NO_LEADER,
                 partitions: dict[tuple[str, int], PartitionState] | None = None) -> None:
        self.brokers: dict[int, BrokerInfo] = brokers or {}
        self.controller_id = controller_id
        self.revision = 0
        self._partitions = _Revised(self, partitions or {})

    @property
    def partitions(self) -> dict[tuple[str, int], PartitionState]:
        return self._partitions

    @partitions.setter
    def partitions(self, states: dict[tuple[str, int], PartitionState]) -> None:
        self._partitions = _Revised(self, states)
        self.revision += 1

    def live_brokers(self) -> list[BrokerInfo]:
        return [self.brokers[i] for i in sorted(self.brokers)]

    def partition_state(self, topic: str, partition: int) -> PartitionState | None:
        return self.partitions.get((topic, partition))


class MetadataAnswers:
    """Encoded Metadata answers (handlers/metadata.py), each kept with what it was made from: one is given
    back only while that is unchanged. At most KEPT_ANSWERS (the oldest goes first)."""

    def __init__(self) -> None:
        self._answers: dict[tuple, tuple[tuple, bytes]] = {}

    def __len__(self) -> int:
        return len(self._answers)

    def get(self, key: tuple, made_from: tuple) -> bytes | None:
        kept = self._answers.get(key)
        return kept[1] if kept is not None and kept[0] == made_from else None

    def put(self, key: tuple, made_from: tuple, answer: bytes) -> None:
        self._answers.pop(key, None)
        if len(self._answers) >= KEPT_ANSWERS:
            del self._answers[next(iter(self._answers))]
        self._answers[key] = (made_from, answer)


def assign_replicas(broker_ids: list[int], num_partitions: int, replication_factor: int,
                    first_partition: int = 0) -> dict[int, list[int]]:
    """Replicas of successive partitions start on successive brokers (from a random one), so
    leaders -- the first replica -- spread over the brokers, as Kafka's rack-unaware assignment does."""
    brokers = sorted(broker_ids)
    if replication_factor < 1 or replication_factor > len(brokers):
        raise InvalidReplicationFactor(
            f"Replication factor: {replication_factor} larger than available brokers: {len(brokers)}."
            if replication_factor > len(brokers) else f"Replication factor must be at least 1, got {replication_factor}")
    start = random.randrange(len(brokers))
    assignment = {}
    for p in range(first_partition, first_partition + num_partitions):
        first = start + p
        assignment[p] = [brokers[(first + k) % len(brokers)] for k in range(replication_factor)]
    return assignment


def check_assignment(assignment: dict[int, list[int]], known_brokers: set[int], first_partition: int = 0) -> None:
    """CreateTopics' explicit assignments: consecutive partitions, distinct registered brokers, one size."""
    if sorted(assignment) != list(range(first_partition, first_partition + len(assignment))):
        raise InvalidReplicaAssignment("partitions must be numbered consecutively from " + str(first_partition))
    sizes = {len(r) for r in assignment.values()}
    if len(sizes) != 1 or 0 in sizes:
        raise InvalidReplicaAssignment("every partition needs the same, non-zero number of replicas")
    for p, replicas in assignment.items():
        if len(set(replicas)) != len(replicas):
            raise InvalidReplicaAssignment(f"partition {p} lists a broker twice: {replicas}")
        unknown = set(replicas) - known_brokers
        if unknown:
            raise InvalidReplicaAssignment(f"partition {p} names brokers that are not registered: {sorted(unknown)}")
