"""A well-behaved client beside an abusive one: its round trips show whether the broker still serves others."""

from __future__ import annotations

import threading
import time

from helpers import wire
from protocol.records import build_batch

INTERVAL_S = 0.05


def produce_body(topic: str, records: bytes, partition: int = 0, acks: int = -1) -> dict:
    return {"transactional_id": None, "acks": acks, "timeout_ms": 10000, "topic_data": [
        {"name": topic, "partition_data": [{"index": partition, "records": records}]}]}


class Bystander:
    """Every 50 ms: an ApiVersions round trip and a one-record Produce to ``topic``, each timed.

    Use as a context manager around the abuse; ``worst`` and ``p99`` are in seconds, ``failures``
    lists anything that went wrong (an error code, a dropped connection).
    """

    def __init__(self, port: int, topic: str) -> None:
        self.port, self.topic = port, topic
        self.round_trips: list[float] = []
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> "Bystander":
        with wire.WireClient(self.port) as c:  # the topic must exist before the clock starts
            c.request("CreateTopics", 5, {"topics": [{"name": self.topic, "num_partitions": 1, "replication_factor": 1,
                                                       "assignments": [], "configs": []}],
                                          "timeout_ms": 10000, "validate_only": False})
        self._client = wire.WireClient(self.port, timeout=60)  # connected before the abuse begins
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(60)

    def _run(self) -> None:
        try:
            with self._client as c:
                while not self._stop.wait(INTERVAL_S):
                    started = time.monotonic()
                    c.request("ApiVersions", 0, {})
                    r = c.request("Produce", 9, produce_body(self.topic, build_batch([(None, b"bystander")])))
                    self.round_trips.append(time.monotonic() - started)
                    code = r["responses"][0]["partition_responses"][0]["error_code"]
                    if code:
                        self.failures.append(f"produce error {code}")
        except Exception as exc:  # noqa: BLE001 -- the report says what happened; the test asserts on it
            self.failures.append(repr(exc))

    @property
    def worst(self) -> float:
        return max(self.round_trips, default=0.0)

    @property
    def p99(self) -> float:
        ordered = sorted(self.round_trips)
        return ordered[int(len(ordered) * 0.99)] if ordered else 0.0

    def check(self, bound_s: float = 2.0) -> None:
        """Served throughout, no round trip over ``bound_s``."""
        assert not self.failures, f"the bystander failed: {self.failures[:3]}"
        assert self.round_trips, "the bystander made no round trip"
        assert self.worst < bound_s, (
            f"a bystander's round trip took up to {self.worst:.2f}s (p99 {self.p99:.3f}s, {len(self.round_trips)} trips)")
