"""confluent-kafka consumers with group.protocol=consumer (KIP-848), each polling in its own thread.

A Member records what it consumed (with when), its incremental assign and revoke
callbacks, and the offsets it committed successfully (synchronous commits after
each message), so tests can check ownership, movement, pauses and resumption.
"""

from __future__ import annotations

import threading
import time

from confluent_kafka import Consumer, KafkaException, Producer

from helpers.kafka import COMMON
from helpers.wire import WireClient

# heartbeats twice a second and sessions of 6 s: reconciliation and fencing in test time
CONSUMER_GROUPS = {"group.consumer.heartbeat.interval.ms": 500, "group.consumer.min.heartbeat.interval.ms": 100,
                   "group.consumer.session.timeout.ms": 6000, "group.consumer.min.session.timeout.ms": 6000}


class Member(threading.Thread):
    def __init__(self, bootstrap: str, group: str, topics: list[str], *, commit: bool = True, **config):
        super().__init__(daemon=True)
        conf = {**COMMON, "bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
                "auto.offset.reset": "earliest", "enable.auto.commit": False}
        if config.get("group_protocol") == "classic":  # a classic member, quick to notice a rebalance
            conf.update({"session.timeout.ms": 6000, "heartbeat.interval.ms": 500})
        conf.update({k.replace("_", "."): v for k, v in config.items()})
        self.consumer = Consumer(conf)
        self.topics = topics
        self.commit = commit
        self.lock = threading.Lock()
        self.got: list[tuple[float, str, int, int]] = []  # (monotonic time, topic, partition, offset)
        self.events: list[tuple[float, str, set]] = []  # (time, "assign" | "revoke", {(topic, partition)})
        self.owned: set[tuple[str, int]] = set()
        self.committed: dict[tuple[str, int], int] = {}  # next offset, acknowledged
        self.acked: dict[tuple[str, int, int], float] = {}  # message -> when its commit was acknowledged
        self.errors: list[str] = []
        self._halt = threading.Event()
        self._close = True

    def run(self) -> None:
        self.consumer.subscribe(self.topics, on_assign=self._on_assign, on_revoke=self._on_revoke,
                                on_lost=self._on_revoke)
        while not self._halt.is_set():
            m = self.consumer.poll(0.1)
            if m is None:
                continue
            if m.error():
                self.errors.append(str(m.error()))
                continue
            with self.lock:
                self.got.append((time.monotonic(), m.topic(), m.partition(), m.offset()))
            if self.commit:
                try:
                    self.consumer.commit(message=m, asynchronous=False)
                except KafkaException as exc:  # e.g. a stale epoch while reconciling: not committed
                    self.errors.append(f"commit: {exc}")
                    continue
                with self.lock:
                    self.committed[(m.topic(), m.partition())] = m.offset() + 1
                    self.acked[(m.topic(), m.partition(), m.offset())] = time.monotonic()
        if self._close:
            self.consumer.close()

    def _on_assign(self, consumer, partitions) -> None:
        tps = {(p.topic, p.partition) for p in partitions}
        with self.lock:
            self.owned |= tps
            self.events.append((time.monotonic(), "assign", tps))

    def _on_revoke(self, consumer, partitions) -> None:
        tps = {(p.topic, p.partition) for p in partitions}
        with self.lock:
            self.owned -= tps
            self.events.append((time.monotonic(), "revoke", tps))

    def stop(self, close: bool = True) -> None:
        """Stop polling; leave the group (close) or just vanish as a killed process would."""
        self._close = close
        self._halt.set()
        self.join(30)

    def snapshot(self) -> tuple[set, list, dict]:
        with self.lock:
            return set(self.owned), list(self.got), dict(self.committed)

    def revoked(self) -> set:
        with self.lock:
            return {tp for _, kind, tps in self.events if kind == "revoke" for tp in tps}


def consumed(*members: Member) -> list[tuple[str, int, int]]:
    return [(t, p, o) for m in members for _, t, p, o in m.snapshot()[1]]


def consumed_again_after_commit(*members: Member) -> list[tuple[str, int, int]]:
    """Messages consumed (by any member) after their commit was acknowledged."""
    acked: dict = {}
    for m in members:
        with m.lock:
            acked.update(m.acked)
    return [(t, p, o) for m in members for when, t, p, o in m.snapshot()[1] if acked.get((t, p, o), when) < when]


def largest_gap(member: Member, partitions: set, start: float, end: float) -> float:
    """The longest time in [start, end] that the member received nothing from ``partitions``."""
    times = sorted(t for t, topic, p, _ in member.snapshot()[1] if (topic, p) in partitions and start <= t <= end)
    points = [start, *times, end]
    return max(b - a for a, b in zip(points, points[1:], strict=False))


def produce(bootstrap: str, topic: str, partitions: int, per_partition: int, start: int = 0) -> None:
    p = Producer({**COMMON, "bootstrap.servers": bootstrap})
    for i in range(start, start + per_partition):
        for part in range(partitions):
            p.produce(topic, value=f"{part}-{i}".encode(), partition=part)
    assert p.flush(30) == 0


def describe(port: int, group: str) -> dict:
    with WireClient(port) as c:
        return c.request("ConsumerGroupDescribe", 0, {"group_ids": [group], "include_authorized_operations": False}
                         )["groups"][0]


def list_groups(port: int, **filters) -> list[dict]:
    with WireClient(port) as c:
        return c.request("ListGroups", 5, {"states_filter": filters.get("states", []),
                                           "types_filter": filters.get("types", [])})["groups"]


def committed_offsets(port: int, group: str) -> dict[tuple[str, int], int]:
    """The group's committed offsets, as an administrator's OffsetFetch (no member) sees them."""
    with WireClient(port) as c:
        r = c.request("OffsetFetch", 9, {"groups": [{"group_id": group, "member_id": None, "member_epoch": -1,
                                                     "topics": None}], "require_stable": False})
    return {(t["name"], p["partition_index"]): p["committed_offset"] for t in r["groups"][0]["topics"]
            for p in t["partitions"]}
