"""KIP-848 consumer groups with Java kafka-clients 4.x (group.protocol=consumer), each member a JVM.

tests/java/ConsumerProtocol.java polls and commits after every poll, printing what it
consumed and its (incremental) assignments and revocations.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from helpers.consumer_protocol import CONSUMER_GROUPS, committed_offsets, describe, list_groups, produce
from helpers.groups import GROUP_BROKER, wait_until
from helpers.java_clients import JavaClients, every
from helpers.kafka import create_topic
from helpers.wire import WireClient

SOURCE = Path(__file__).resolve().parents[1] / "java" / "ConsumerProtocol.java"


@pytest.fixture(scope="module")
def java4(tmp_path_factory) -> JavaClients:
    return JavaClients.build_4x(tmp_path_factory.mktemp("java4-848"), SOURCE)  # missing JDK or jar: make test-deps


def records(lines: list[dict]) -> list[tuple[str, int, int]]:
    return [(r["topic"], r["p"], r["o"]) for r in every(lines, "record")]


def owned_before_close(lines: list[dict]) -> set:
    """What the member owned when it was told to stop: closing revokes everything, the last revocation."""
    events = [line for line in lines if line["op"] in ("assigned", "revoked")]
    if events and events[-1]["op"] == "revoked":
        events.pop()
    owned: set = set()
    for line in events:
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

        group = wait_until(both_assigned, 60, "both members assigned")
        assert all(m["assignment"]["topic_partitions"] for m in group["members"]), group  # two partitions each
        produce(b.bootstrap, "jshared", 4, 10, start=30)  # for both of them
        time.sleep(3)  # everything consumed and committed by now (commits after every poll)
        stop.touch()
        first, second = (r.result() for r in runs)
    got = records(first) + records(second)
    assert sorted(got) == sorted(("jshared", p, o) for p in range(4) for o in range(40)), "lost or consumed twice"
    assert any(o >= 30 for _, _, o in records(first)) and any(o >= 30 for _, _, o in records(second))
    produce(b.bootstrap, "jshared", 4, 5, start=40)
    again = java4.run(b.bootstrap, "g-java", "jshared", "-", 3000, 60_000)
    assert sorted(o for _, _, o in records(again)) == sorted(list(range(40, 45)) * 4), "did not resume at the commits"


def test_java_member_joining_moves_only_what_must_move(start_broker, java4, tmp_path):
    b = start_broker(CONSUMER_GROUPS)
    create_topic(b.bootstrap, "jflow", 4)
    stop = tmp_path / "stop"
    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(java4.run, b.bootstrap, "g-jflow", "jflow", "-", 600_000, 60_000, stop)
        wait_for_group(b.port, "g-jflow", lambda g: len(g["members"]) == 1 and g["group_state"] == "Stable",
                       "the first member alone")
        second = pool.submit(java4.run, b.bootstrap, "g-jflow", "jflow", "-", 600_000, 60_000, stop)
        wait_for_group(b.port, "g-jflow", lambda g: len(g["members"]) == 2 and g["group_state"] == "Stable",
                       "the second member's share")
        time.sleep(2)  # (a client's callbacks run at its next poll, after the broker's answer)
        stopped_ms = time.time() * 1000
        stop.touch()
        first, second = first.result(), second.result()
    # (closing revokes everything: only what came before counts)
    revoked = {tuple(tp) for line in every(first, "revoked") if line["t"] < stopped_ms for tp in line["partitions"]}
    joined = {tuple(tp) for line in every(second, "assigned") for tp in line["partitions"]}
    assert len(joined) == 2 and revoked == joined, (revoked, joined)  # the first member gave up only those


def wait_for_group(port: int, group: str, check, what: str, timeout: float = 60) -> dict:
    """The group's ConsumerGroupDescribe once ``check`` holds for it."""
    def described():
        d = describe(port, group)
        return d if d["error_code"] == 0 and check(d) else None

    return wait_until(described, timeout, what)


def assigned_topics(described: dict) -> set:
    return {(t["topic_name"], p) for m in described["members"] for t in m["assignment"]["topic_partitions"]
            for p in t["partitions"]}


def test_java_static_member_restarts_without_reassignment(start_broker, java4, tmp_path):
    b = start_broker({**CONSUMER_GROUPS, "group.consumer.session.timeout.ms": 30000})  # a slow restart is no leave
    create_topic(b.bootstrap, "jstatic", 4)
    stops = [tmp_path / f"stop-{i}" for i in range(3)]
    stable_pair = lambda g: (g["group_state"] == "Stable" and len(g["members"]) == 2  # noqa: E731
                             and len(assigned_topics(g)) == 4 and all(m["assignment"]["topic_partitions"]
                                                                      for m in g["members"]))
    with ThreadPoolExecutor(3) as pool:
        first = pool.submit(java4.run, b.bootstrap, "g-jstatic", "jstatic", "i-1", 600_000, 60_000, stops[0])
        other = pool.submit(java4.run, b.bootstrap, "g-jstatic", "jstatic", "i-2", 600_000, 60_000, stops[1])
        before = wait_for_group(b.port, "g-jstatic", stable_pair, "two static members")
        time.sleep(1)  # (a client's callbacks run at its next poll, after the broker's answer)
        settled_ms = time.time() * 1000
        stops[0].touch()  # leaves for now (epoch -2); the instance's partitions wait for it
        first = first.result()
        again = pool.submit(java4.run, b.bootstrap, "g-jstatic", "jstatic", "i-1", 600_000, 60_000, stops[2])
        after = wait_for_group(b.port, "g-jstatic", lambda g: stable_pair(g) and all(
            m["member_epoch"] > 0 for m in g["members"]), "the static member back")
        time.sleep(2)  # (the returned member's callbacks run at its next poll, after the broker's answer)
        stopped_ms = time.time() * 1000
        stops[1].touch()
        stops[2].touch()
        other, again = other.result(), again.result()
    assert after["group_epoch"] == before["group_epoch"], (before, after)
    moves = [line for line in other if line["op"] in ("assigned", "revoked") and line["partitions"]
             and settled_ms < line["t"] < stopped_ms]
    assert not moves, moves  # the other member's partitions never moved
    assert owned_before_close(again) == owned_before_close(first) and len(owned_before_close(first)) == 2


def test_java_regex_subscription_picks_up_a_new_topic(start_broker, java4, tmp_path):
    b = start_broker(CONSUMER_GROUPS)
    create_topic(b.bootstrap, "jrx-first", 2)
    produce(b.bootstrap, "jrx-first", 2, 3)
    stop = tmp_path / "stop"
    with ThreadPoolExecutor(1) as pool:
        run = pool.submit(java4.run, b.bootstrap, "g-jrx", "re:jrx-.*", "-", 600_000, 60_000, stop)
        wait_for_group(b.port, "g-jrx", lambda g: len(assigned_topics(g)) == 2, "the matching topic assigned")
        create_topic(b.bootstrap, "jrx-later", 2)
        produce(b.bootstrap, "jrx-later", 2, 3)
        wait_for_group(b.port, "g-jrx", lambda g: len(assigned_topics(g)) == 4, "the topic created later assigned")
        wait_until(lambda: sum(o for (t, _), o in committed_offsets(b.port, "g-jrx").items() if t == "jrx-later") == 6,
                   60, "the new topic's records consumed")
        stop.touch()
        lines = run.result()
    assert sorted(records(lines)) == sorted([("jrx-first", p, o) for p in range(2) for o in range(3)]
                                            + [("jrx-later", p, o) for p in range(2) for o in range(3)])
    assert describe(b.port, "g-jrx")["group_state"] == "Empty"


def test_java_members_resume_after_a_broker_kill(start_broker, java4, tmp_path):
    b = start_broker(CONSUMER_GROUPS)
    create_topic(b.bootstrap, "jkill", 4)
    produce(b.bootstrap, "jkill", 4, 20)
    stop = tmp_path / "stop"

    def committed() -> list[int]:
        return sorted(committed_offsets(b.port, "g-jkill").values())

    with ThreadPoolExecutor(2) as pool:
        runs = [pool.submit(java4.run, b.bootstrap, "g-jkill", "jkill", "-", 600_000, 90_000, stop) for _ in range(2)]
        before = wait_for_group(b.port, "g-jkill", lambda g: g["group_state"] == "Stable" and len(g["members"]) == 2
                                and committed() == [20] * 4, "both members caught up")
        b.kill()
        b.restart()
        produce(b.bootstrap, "jkill", 4, 10, start=20)
        wait_until(lambda: committed() == [30] * 4, 60, "the records after the restart committed")
        after = describe(b.port, "g-jkill")
        stop.touch()
        lines = [r.result() for r in runs]
    got = records(lines[0]) + records(lines[1])
    assert sorted(got) == sorted(("jkill", p, o) for p in range(4) for o in range(30)), "lost or consumed twice"
    # loaded from __consumer_offsets: the same members at the same group epoch
    assert after["group_epoch"] == before["group_epoch"], (before, after)
    assert sorted(m["member_id"] for m in after["members"]) == sorted(m["member_id"] for m in before["members"])


def test_java_online_upgrade_of_a_classic_group(start_broker, java4, tmp_path):
    """Two classic Java members, then a consumer-protocol one joins: the group is upgraded and the classic
    members consume on through the bridge. Nothing is lost; a record is consumed twice only if a commit of it
    failed (a classic member's group moved on under it)."""
    b = start_broker({**CONSUMER_GROUPS, **GROUP_BROKER})
    create_topic(b.bootstrap, "jupg", 4)
    produce(b.bootstrap, "jupg", 4, 20)
    stop = tmp_path / "stop"
    classic = {"group.protocol": "classic", "session.timeout.ms": "6000", "heartbeat.interval.ms": "500"}

    def committed() -> list[int]:
        return sorted(committed_offsets(b.port, "g-jupg").values())

    with ThreadPoolExecutor(3) as pool:
        runs = [pool.submit(java4.run, b.bootstrap, "g-jupg", "jupg", "-", 600_000, 90_000, stop, client_config=classic)
                for _ in range(2)]
        with WireClient(b.port) as c:
            def classic_stable():
                g = c.request("DescribeGroups", 5, {"groups": ["g-jupg"], "include_authorized_operations": False}
                              )["groups"][0]
                return g["group_state"] == "Stable" and len(g["members"]) == 2
            wait_until(lambda: classic_stable() and committed() == [20] * 4, 60, "the classic generation caught up")
        runs.append(pool.submit(java4.run, b.bootstrap, "g-jupg", "jupg", "-", 600_000, 90_000, stop))
        wait_for_group(b.port, "g-jupg", lambda g: g["group_state"] == "Stable" and len(g["members"]) == 3
                       and len(assigned_topics(g)) == 4 and all(m["assignment"]["topic_partitions"]
                                                               for m in g["members"]), "three members sharing")
        assert [g["group_type"] for g in list_groups(b.port) if g["group_id"] == "g-jupg"] == ["consumer"]
        produce(b.bootstrap, "jupg", 4, 10, start=20)
        wait_until(lambda: committed() == [30] * 4, 60, "the records after the upgrade consumed")
        stop.touch()
        lines = [r.result() for r in runs]
    got = [r for run in lines for r in records(run)]
    assert sorted(set(got)) == sorted(("jupg", p, o) for p in range(4) for o in range(30)), "lost"
    failed = {tuple(r) for run in lines for line in every(run, "commit_failed") for r in line["records"]}
    assert {r for r in got if got.count(r) > 1} <= failed, "consumed twice after its commit"
    assert all(any(o >= 20 for _, _, o in records(run)) for run in lines[:2]), "a classic member stopped consuming"
