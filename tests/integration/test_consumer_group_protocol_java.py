"""KIP-848 consumer groups with Java kafka-clients 4.x (group.protocol=consumer), each member a JVM.

tests/java/ConsumerProtocol.java polls and commits after every poll, printing what it
consumed and its (incremental) assignments and revocations.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from helpers.consumer_protocol import CONSUMER_GROUPS, describe, produce
from helpers.java_clients import JavaClients, every
from helpers.kafka import create_topic

SOURCE = Path(__file__).resolve().parents[1] / "java" / "ConsumerProtocol.java"


@pytest.fixture(scope="module")
def java4(tmp_path_factory) -> JavaClients:
    return JavaClients.build_4x(tmp_path_factory.mktemp("java4-848"), SOURCE)  # missing JDK or jar: make test-deps


def records(lines: list[dict]) -> list[tuple[str, int, int]]:
    return [(r["topic"], r["p"], r["o"]) for r in every(lines, "record")]


def owned_at_end(lines: list[dict]) -> set:
    owned: set = set()
    for line in lines:
        if line["op"] == "assigned":
            owned |= {tuple(tp) for tp in line["partitions"]}
        elif line["op"] == "revoked":
            owned -= {tuple(tp) for tp in line["partitions"]}
    return owned


def test_java_members_share_a_topic_commit_and_resume(start_broker, java4, tmp_path):
    b = start_broker(CONSUMER_GROUPS)
    create_topic(b.bootstrap, "jshared", 4)
    produce(b.bootstrap, "jshared", 4, 30)
    stop = tmp_path / "stop"
    with ThreadPoolExecutor(2) as pool:
        runs = [pool.submit(java4.run, b.bootstrap, "g-java", "jshared", "-", 600_000, 60_000, stop) for _ in range(2)]

        def both_assigned() -> dict:
            group = describe(b.port, "g-java")
            owned = [p for m in group["members"] for t in m["assignment"]["topic_partitions"] for p in t["partitions"]]
            return group if len(group["members"]) == 2 and sorted(owned) == [0, 1, 2, 3] and group[
                "group_state"] == "Stable" else None

        deadline = time.monotonic() + 60
        while not both_assigned():
            assert time.monotonic() < deadline, describe(b.port, "g-java")
            time.sleep(0.3)
        group = both_assigned()
        assert all(m["assignment"]["topic_partitions"] for m in group["members"]), group  # two partitions each
        time.sleep(3)  # everything consumed and committed by now (commits after every poll)
        stop.touch()
        first, second = (r.result() for r in runs)
    got = records(first) + records(second)
    assert sorted(got) == sorted(("jshared", p, o) for p in range(4) for o in range(30)), "lost or consumed twice"
    assert records(first) and records(second)
    produce(b.bootstrap, "jshared", 4, 5, start=30)
    again = java4.run(b.bootstrap, "g-java", "jshared", "-", 3000, 60_000)
    assert sorted(o for _, _, o in records(again)) == sorted(list(range(30, 35)) * 4), "did not resume at the commits"


def test_java_member_joining_moves_only_what_must_move(start_broker, java4, tmp_path):
    b = start_broker(CONSUMER_GROUPS)
    create_topic(b.bootstrap, "jflow", 4)
    stop = tmp_path / "stop"
    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(java4.run, b.bootstrap, "g-jflow", "jflow", "-", 600_000, 60_000, stop)
        deadline = time.monotonic() + 60
        while len(describe(b.port, "g-jflow")["members"]) != 1 or describe(b.port, "g-jflow")["group_state"] != "Stable":
            assert time.monotonic() < deadline, describe(b.port, "g-jflow")
            time.sleep(0.3)
        second = pool.submit(java4.run, b.bootstrap, "g-jflow", "jflow", "-", 600_000, 60_000, stop)
        deadline = time.monotonic() + 60
        while describe(b.port, "g-jflow")["group_state"] != "Stable" or len(describe(b.port, "g-jflow")["members"]) != 2:
            assert time.monotonic() < deadline, describe(b.port, "g-jflow")
            time.sleep(0.3)
        stopped_ms = time.time() * 1000
        stop.touch()
        first, second = first.result(), second.result()
    # (closing revokes everything: only what came before counts)
    revoked = {tuple(tp) for line in every(first, "revoked") if line["t"] < stopped_ms for tp in line["partitions"]}
    joined = {tuple(tp) for line in every(second, "assigned") for tp in line["partitions"]}
    assert len(joined) == 2 and revoked == joined, (revoked, joined)  # the first member gave up only those
