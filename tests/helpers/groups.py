"""Consumer group test helpers: group members in-process or in their own process,
their assignments replayed from rebalance callbacks, and bounded waiting."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from confluent_kafka import Consumer

from helpers.kafka import COMMON

MEMBER_SCRIPT = Path(__file__).with_name("group_member.py")

# Quick rebalances for tests; the session timeouts the clients ask for must be allowed.
GROUP_BROKER = {"group.initial.rebalance.delay.ms": 300, "group.min.session.timeout.ms": 1000}


def wait_until(check, timeout: float, what: str, interval: float = 0.1):
    """Call ``check`` until it returns something truthy; fail saying ``what`` at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def member_config(bootstrap: str, group: str, **config) -> dict:
    conf = {
        **COMMON,
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "session.timeout.ms": 3000,
        "heartbeat.interval.ms": 300,
    }
    conf.update({k.replace("_", "."): v for k, v in config.items()})
    return conf


def replay(events: list[tuple[str, list[int]]]) -> set[int]:
    """The partitions a member owns after its rebalance callbacks (eager or incremental)."""
    owned: set[int] = set()
    for kind, partitions in events:
        if kind == "assign":
            owned |= set(partitions)
        elif kind in ("revoke", "lost"):
            owned -= set(partitions)
    return owned


class TrackedConsumer:
    """An in-process confluent-kafka group member that records its rebalance callbacks."""

    def __init__(self, bootstrap: str, group: str, topic: str, **config):
        self.events: list[tuple[str, list[int]]] = []
        self.consumer = Consumer(member_config(bootstrap, group, **config))
        self.consumer.subscribe(
            [topic], on_assign=self._record("assign"), on_revoke=self._record("revoke"), on_lost=self._record("lost")
        )

    def _record(self, kind: str):
        return lambda consumer, partitions: self.events.append((kind, [p.partition for p in partitions]))

    @property
    def assignment(self) -> set[int]:
        return replay(self.events)

    def poll(self, seconds: float) -> list:
        """Poll for about ``seconds``; returns the messages (errors fail the test)."""
        got = []
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            m = self.consumer.poll(0.05)
            if m is not None:
                assert m.error() is None, f"consumer error: {m.error()}"
                got.append(m)
        return got

    def close(self) -> None:
        self.consumer.close()


class MemberProcess:
    """A group member running tests/helpers/group_member.py; it can be SIGKILLed."""

    def __init__(self, workdir: Path, name: str, bootstrap: str, group: str, topic: str, delay: float = 0.0, **config):
        self.name = name
        self.events_path = Path(workdir) / f"{name}.events"
        config = member_config(bootstrap, group, **config)
        self.proc = subprocess.Popen(
            [sys.executable, str(MEMBER_SCRIPT), json.dumps(config), topic, str(self.events_path), str(delay)],
            cwd=str(MEMBER_SCRIPT.parents[1]),
            env={**os.environ, "PYTHONPATH": str(MEMBER_SCRIPT.parents[1])},
            stdin=subprocess.DEVNULL,
        )

    def lines(self) -> list[list[str]]:
        if not self.events_path.exists():
            return []
        return [line.split(" ") for line in self.events_path.read_text().splitlines() if line]

    @property
    def assignment(self) -> set[int]:
        return replay([(kind, [int(p) for p in rest[0].split(",") if p]) for kind, *rest in self.lines()
                       if kind in ("assign", "revoke", "lost")])

    def processed(self) -> list[tuple[int, int]]:
        return [(int(p), int(o)) for kind, p, o, *_ in (ln for ln in self.lines() if ln[0] == "msg")]

    def kill(self) -> None:
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.kill()
