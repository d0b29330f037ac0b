"""KIP-848 consumer groups (group.protocol=consumer) with confluent-kafka against a real broker.

The broker assigns (uniform assignor), members reconcile on their heartbeats, and
every change is in __consumer_offsets as Kafka's consumer group records: a
restarted broker resumes the group where it was.
"""

from __future__ import annotations

import threading
import time

import pytest

from confluent_kafka import Consumer, ConsumerGroupState, ConsumerGroupType, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from helpers.consumer_protocol import (
    CONSUMER_GROUPS,
    Member,
    committed_offsets,
    consumed,
    consumed_again_after_commit,
    describe,
    largest_gap,
    list_groups,
    produce,
)
from helpers.groups import GROUP_BROKER, wait_until
from helpers.kafka import COMMON, create_topic
from helpers.wire import WireClient, alter_group_configs, describe_group_configs


@pytest.fixture
def member():
    """Factory of started Members; any still running at the end are stopped (closed)."""
    started: list[Member] = []

    def _member(*args, **kwargs) -> Member:
        m = Member(*args, **kwargs)
        started.append(m)
        m.start()
        return m

    yield _member
    for m in started:
        if m.is_alive():
            m.stop()


def test_two_members_share_a_topic_commit_and_resume(start_broker, member):
    b = start_broker(CONSUMER_GROUPS)
    create_topic(b.bootstrap, "shared", 6)
    produce(b.bootstrap, "shared", 6, 50)
    m1, m2 = member(b.bootstrap, "g-share", ["shared"]), member(b.bootstrap, "g-share", ["shared"])
    every = {("shared", p) for p in range(6)}
    wait_until(lambda: m1.snapshot()[0] and m2.snapshot()[0] and m1.snapshot()[0] | m2.snapshot()[0] == every
               and not m1.snapshot()[0] & m2.snapshot()[0], 60, "both members to own a share of the partitions")
    wait_until(lambda: len(set(consumed(m1, m2))) == 300, 60, "every message consumed")
    wait_until(lambda: sum(max(m1.snapshot()[2].get(tp, 0), m2.snapshot()[2].get(tp, 0)) for tp in every) == 300,
               30, f"every message committed ({m1.errors[:3]}, {m2.errors[:3]})")
    assert len(consumed(m1, m2)) == 300, "a message was consumed twice"

    group = describe(b.port, "g-share")
    assert group["error_code"] == 0 and group["group_state"] == "Stable", group
    assert {m["member_epoch"] for m in group["members"]} == {group["assignment_epoch"]}
    owned = [(t["topic_name"], p) for m in group["members"] for t in m["assignment"]["topic_partitions"]
             for p in t["partitions"]]
    assert sorted(owned) == sorted(every)  # each partition owned once
    listed = {g["group_id"]: g for g in list_groups(b.port, types=["consumer"])}
    assert listed["g-share"]["group_type"] == "consumer" and listed["g-share"]["group_state"] == "Stable"
    assert "g-share" not in {g["group_id"] for g in list_groups(b.port, types=["classic"])}
    admin = AdminClient({**COMMON, "bootstrap.servers": b.bootstrap})
    seen = admin.describe_consumer_groups(["g-share"])["g-share"].result(30)  # librdkafka: ConsumerGroupDescribe
    assert seen.type == ConsumerGroupType.CONSUMER and seen.state == ConsumerGroupState.STABLE, seen
    assert sorted((tp.topic, tp.partition) for m in seen.members for tp in m.assignment.topic_partitions) == sorted(every)

    m1.stop(); m2.stop()
    produce(b.bootstrap, "shared", 6, 10, start=50)
    m3 = member(b.bootstrap, "g-share", ["shared"])
    wait_until(lambda: len(consumed(m3)) >= 60, 60, "the new messages consumed after the restart")
    time.sleep(1)
    assert sorted(o for _, _, o in consumed(m3)) == sorted(list(range(50, 60)) * 6), "resumed elsewhere"
    m3.stop()


def test_join_and_leave_move_only_what_must_move(start_broker, member):
    b = start_broker(CONSUMER_GROUPS)
    create_topic(b.bootstrap, "flow", 4)
    stop = threading.Event()

    def keep_producing():
        p = Producer({**COMMON, "bootstrap.servers": b.bootstrap, "linger.ms": 5})
        while not stop.is_set():
            for part in range(4):
                p.produce("flow", value=b"x", partition=part)
            p.poll(0)
            time.sleep(0.05)
        p.flush(10)

    producer = threading.Thread(target=keep_producing, daemon=True)
    producer.start()
    m1 = member(b.bootstrap, "g-flow", ["flow"], commit=False)
    wait_until(lambda: len(m1.snapshot()[0]) == 4 and len(consumed(m1)) > 40, 60, "the first member to own all four")
    joined_at = time.monotonic()
    m2 = member(b.bootstrap, "g-flow", ["flow"], commit=False)
    wait_until(lambda: len(m2.snapshot()[0]) == 2 and len(m1.snapshot()[0]) == 2, 60, "the second member's share")
    time.sleep(2)
    kept = m1.snapshot()[0]
    # only what moved was revoked (a stop-the-world rebalance revokes everything); the partitions m1 kept
    # never stopped: no gap in them longer than a loaded machine's hiccup
    assert m1.revoked() == m2.snapshot()[0]
    gap = largest_gap(m1, kept, joined_at, time.monotonic())
    assert gap < 5.0, f"the staying member paused {gap:.1f}s while another joined"

    left_at = time.monotonic()
    m2.stop()
    wait_until(lambda: len(m1.snapshot()[0]) == 4, 60, "the leaver's partitions back at the first member")
    time.sleep(2)
    assert not kept & m1.revoked(), "a partition the staying member kept was revoked"
    gap = largest_gap(m1, kept, left_at, time.monotonic())
    assert gap < 5.0, f"the staying member paused {gap:.1f}s while another left"
    stop.set()
    producer.join(15)
    m1.stop()


def test_regex_subscription_picks_up_a_new_topic(start_broker, member):
    b = start_broker(CONSUMER_GROUPS)
    create_topic(b.bootstrap, "rx-first", 2)
    create_topic(b.bootstrap, "other", 1)
    produce(b.bootstrap, "rx-first", 2, 5)
    produce(b.bootstrap, "other", 1, 5)
    m = member(b.bootstrap, "g-regex", ["^rx-.*"], commit=False)
    wait_until(lambda: len(consumed(m)) == 10, 60, "the matching topic consumed")
    create_topic(b.bootstrap, "rx-later", 3)
    produce(b.bootstrap, "rx-later", 3, 4)
    wait_until(lambda: sum(t == "rx-later" for t, _, _ in consumed(m)) == 12, 60, "the topic created later consumed")
    assert {t for t, _, _ in consumed(m)} == {"rx-first", "rx-later"}
    described = describe(b.port, "g-regex")["members"][0]
    assert "^rx-.*" in described["subscribed_topic_regex"]  # (librdkafka sends it as "(^rx-.*)")
    m.stop()


def test_static_member_restarts_without_reassignment(start_broker, member):
    b = start_broker({**CONSUMER_GROUPS, "group.consumer.session.timeout.ms": 30000})  # a slow restart is no leave
    create_topic(b.bootstrap, "static", 4)
    m1 = member(b.bootstrap, "g-static", ["static"], commit=False, group_instance_id="i-1")
    m2 = member(b.bootstrap, "g-static", ["static"], commit=False, group_instance_id="i-2")
    wait_until(lambda: len(m1.snapshot()[0]) == 2 and len(m2.snapshot()[0]) == 2, 60, "two partitions each")
    time.sleep(1)
    before = describe(b.port, "g-static")
    owned_by_1, events_2 = m1.snapshot()[0], len(m2.events)
    m1.stop()  # a static member leaves for now (epoch -2): its partitions wait for it
    m1b = member(b.bootstrap, "g-static", ["static"], commit=False, group_instance_id="i-1")
    wait_until(lambda: m1b.snapshot()[0] == owned_by_1, 30, "the restarted static member's partitions")
    time.sleep(2)
    after = describe(b.port, "g-static")
    assert after["group_epoch"] == before["group_epoch"], "the group rebalanced for a static member's restart"
    assert len(m2.events) == events_2, "the other member's assignment moved"
    assert sorted(m["instance_id"] for m in after["members"]) == ["i-1", "i-2"]
    m1b.stop(); m2.stop()


def test_broker_killed_resumes_the_group_with_nothing_committed_lost(start_broker, member):
    b = start_broker(CONSUMER_GROUPS)
    create_topic(b.bootstrap, "durable", 4)
    produce(b.bootstrap, "durable", 4, 40)
    m1, m2 = member(b.bootstrap, "g-kill", ["durable"]), member(b.bootstrap, "g-kill", ["durable"])
    wait_until(lambda: len(consumed(m1, m2)) >= 60, 60, "some messages consumed")
    before = describe(b.port, "g-kill")
    b.kill()
    killed_at = time.monotonic()
    committed = {**m1.snapshot()[2]}
    for tp, offset in m2.snapshot()[2].items():
        committed[tp] = max(committed.get(tp, 0), offset)
    b.restart()
    produce(b.bootstrap, "durable", 4, 10, start=40)
    wait_until(lambda: {(t, p, o) for t, p, o in consumed(m1, m2)} >= {("durable", p, o) for p in range(4)
                                                                       for o in range(50)}, 90, "everything consumed")
    again = [(t, p, o) for m in (m1, m2) for when, t, p, o in m.snapshot()[1]
             if when > killed_at and o < committed.get((t, p), 0)]
    assert not again, f"consumed again after it was committed: {again[:5]}"
    after = describe(b.port, "g-kill")
    # loaded from __consumer_offsets: the same members at the same group epoch, nobody had to rejoin
    assert after["group_epoch"] == before["group_epoch"], (before, after)
    assert sorted(m["member_id"] for m in after["members"]) == sorted(m["member_id"] for m in before["members"])
    m1.stop(); m2.stop()


def heartbeat(c: WireClient, group: str, member_id: str, epoch: int, *, topics=None, owned=None, version: int = 1,
              instance_id=None, assignor=None, regex=None) -> dict:
    return c.request("ConsumerGroupHeartbeat", version, {
        "group_id": group, "member_id": member_id, "member_epoch": epoch, "instance_id": instance_id,
        "rack_id": None, "rebalance_timeout_ms": 30000 if epoch == 0 else -1, "subscribed_topic_names": topics,
        "subscribed_topic_regex": regex, "server_assignor": assignor, "topic_partitions": owned,
    })


def test_epochs_on_the_wire(start_broker):
    """What clients hide: member epochs checked by heartbeats, commits and fetches; the range assignor."""
    b = start_broker(CONSUMER_GROUPS)
    create_topic(b.bootstrap, "wire", 4)
    with WireClient(b.port) as c:
        topic_id = c.request("Metadata", 12, {"topics": [{"topic_id": None, "name": "wire"}],
                                              "allow_auto_topic_creation": False,
                                              "include_topic_authorized_operations": False})["topics"][0]["topic_id"]
        assert heartbeat(c, "g-wire", "m-1", 0, topics=["wire"], owned=[], assignor="sticky")["error_code"] == 112
        assert heartbeat(c, "g-wire", "", 0, topics=["wire"], owned=[])["error_code"] == 42  # v1: the client's id
        assert heartbeat(c, "g-wire", "m-1", 0, topics=["wire"], owned=[], regex="(")["error_code"] == 128
        # what would make a backtracking match explode is refused too (RE2, Kafka's engine, is linear)
        assert heartbeat(c, "g-wire", "m-1", 0, topics=["wire"], owned=[], regex="(a+)+$")["error_code"] == 128
        first = heartbeat(c, "g-wire", "m-1", 0, topics=["wire"], owned=[], assignor="range")
        assert first["error_code"] == 0 and first["member_epoch"] == 1, first
        assert first["assignment"]["topic_partitions"] == [{"topic_id": topic_id, "partitions": [0, 1, 2, 3]}]
        second = heartbeat(c, "g-wire", "m-2", 0, topics=["wire"], owned=[], assignor="range")
        assert second["member_epoch"] == 2 and second["assignment"]["topic_partitions"] == []  # held by m-1 still
        # m-1 is told to give up 2 and 3 (range: m-1 keeps the first half), at its epoch
        revoke = heartbeat(c, "g-wire", "m-1", 1)
        assert revoke["member_epoch"] == 1
        assert revoke["assignment"]["topic_partitions"] == [{"topic_id": topic_id, "partitions": [0, 1]}]
        assert heartbeat(c, "g-wire", "m-1", 5)["error_code"] == 110  # FENCED_MEMBER_EPOCH
        assert heartbeat(c, "g-wire", "nobody", 3)["error_code"] == 25  # UNKNOWN_MEMBER_ID

        def commit(member_id, epoch):
            return c.request("OffsetCommit", 9, {
                "group_id": "g-wire", "generation_id_or_member_epoch": epoch, "member_id": member_id,
                "group_instance_id": None, "retention_time_ms": -1,
                "topics": [{"name": "wire", "partitions": [{"partition_index": 0, "committed_offset": 7,
                                                            "committed_leader_epoch": -1,
                                                            "committed_metadata": None}]}],
            })["topics"][0]["partitions"][0]["error_code"]

        assert commit("m-1", 1) == 0
        assert commit("m-1", 0) == 113  # STALE_MEMBER_EPOCH
        assert commit("", -1) == 25  # a simple commit to a group with members

        def fetch(member_id, epoch):
            return c.request("OffsetFetch", 9, {"groups": [{"group_id": "g-wire", "member_id": member_id,
                                                            "member_epoch": epoch, "topics": None}],
                                                "require_stable": False})["groups"][0]

        assert fetch("m-1", 1)["topics"][0]["partitions"][0]["committed_offset"] == 7
        assert fetch("m-1", 4)["error_code"] == 113
        assert fetch(None, -1)["error_code"] == 0  # an admin's fetch

        done = heartbeat(c, "g-wire", "m-1", 1, owned=[{"topic_id": topic_id, "partitions": [0, 1]}])
        assert done["member_epoch"] == 2
        taken = heartbeat(c, "g-wire", "m-2", 2)
        assert taken["assignment"]["topic_partitions"] == [{"topic_id": topic_id, "partitions": [2, 3]}]
        group = describe(b.port, "g-wire")
        assert group["group_state"] == "Stable" and group["assignor_name"] == "range", group
        assert heartbeat(c, "g-wire", "m-2", -1)["member_epoch"] == -1
        assert heartbeat(c, "g-wire", "m-1", 2)["member_epoch"] == 3  # the leaver's partitions, at a new epoch
        assert c.request("DescribeGroups", 5, {"groups": ["g-wire"], "include_authorized_operations": False}
                         )["groups"][0]["group_state"] == "Dead"


def test_online_upgrade_of_a_classic_group(start_broker, member):
    """Classic members (JoinGroup/SyncGroup, eager range) joined by a consumer-protocol member: the group
    becomes a consumer group, the classic members go on through the bridge, then restart one by one with
    the consumer protocol. Nothing is lost, and nothing is consumed twice once its commit was acknowledged."""
    b = start_broker({**CONSUMER_GROUPS, **GROUP_BROKER})
    create_topic(b.bootstrap, "upg", 4)
    produce(b.bootstrap, "upg", 4, 10)
    classic = [member(b.bootstrap, "g-upg", ["upg"], group_protocol="classic") for _ in range(2)]
    wait_until(lambda: all(len(m.snapshot()[0]) == 2 for m in classic) and len(consumed(*classic)) >= 40, 60,
               "the classic members' generation")
    assert list_groups(b.port, types=["classic"])[0]["group_id"] == "g-upg"
    members = [*classic, member(b.bootstrap, "g-upg", ["upg"])]

    def settled(ms) -> bool:
        owned = [m.snapshot()[0] for m in ms]
        return all(owned) and sum(map(len, owned)) == 4 and len(set().union(*owned)) == 4

    wait_until(lambda: settled(members), 60, "the three members to share the partitions")
    listed = list_groups(b.port, types=["consumer"])
    assert [g["group_id"] for g in listed] == ["g-upg"], listed
    assert len(describe(b.port, "g-upg")["members"]) == 3
    produce(b.bootstrap, "upg", 4, 10, start=10)
    wait_until(lambda: {(p, o) for _, p, o in consumed(*members)} >= {(p, o) for p in range(4) for o in range(20)},
               60, "the classic members to consume on through the bridge")
    for old in classic:  # a rolling upgrade
        old.stop()
        members.append(member(b.bootstrap, "g-upg", ["upg"]))
    active = members[2:]
    wait_until(lambda: settled(active), 60, "the upgraded members to share the partitions")
    produce(b.bootstrap, "upg", 4, 10, start=20)
    wait_until(lambda: {(p, o) for _, p, o in consumed(*members)} >= {(p, o) for p in range(4) for o in range(30)},
               60, "everything consumed")
    assert not consumed_again_after_commit(*members)
    for old in classic:
        assert any(10 <= o < 20 for _, _, o in consumed(old)), "a classic member stopped consuming after the upgrade"
    group = describe(b.port, "g-upg")
    assert group["group_state"] == "Stable" and len(group["members"]) == 3, group


def test_online_downgrade_when_the_last_consumer_protocol_member_leaves(start_broker, member):
    """A classic member and a consumer-protocol one: when the latter leaves, the group is a classic one
    again (Kafka 4's online downgrade) and the classic member consumes on in a new generation."""
    b = start_broker({**CONSUMER_GROUPS, **GROUP_BROKER})
    create_topic(b.bootstrap, "down", 2)
    produce(b.bootstrap, "down", 2, 5)
    old = member(b.bootstrap, "g-down", ["down"], group_protocol="classic")
    wait_until(lambda: len(old.snapshot()[0]) == 2, 60, "the classic member's generation")
    new = member(b.bootstrap, "g-down", ["down"])
    wait_until(lambda: len(new.snapshot()[0]) == 1 and len(old.snapshot()[0]) == 1, 60, "a partition each")
    assert [g["group_type"] for g in list_groups(b.port) if g["group_id"] == "g-down"] == ["consumer"]
    new.stop()
    wait_until(lambda: [g["group_type"] for g in list_groups(b.port) if g["group_id"] == "g-down"] == ["classic"], 30,
               "the group to be a classic one again")
    wait_until(lambda: len(old.snapshot()[0]) == 2, 60, "the classic member to take both partitions")
    produce(b.bootstrap, "down", 2, 5, start=5)
    wait_until(lambda: {(p, o) for _, p, o in consumed(old, new)} >= {(p, o) for p in range(2) for o in range(10)},
               60, "everything consumed")
    assert not consumed_again_after_commit(old, new)
    with WireClient(b.port) as c:
        group = c.request("DescribeGroups", 5, {"groups": ["g-down"], "include_authorized_operations": False}
                          )["groups"][0]
    assert group["group_state"] == "Stable" and len(group["members"]) == 1, group


def test_transactional_offsets_of_a_consumer_protocol_member(start_broker):
    """A copy app: consumer-protocol consumer, transactional producer sending its offsets with the consumer's
    group metadata (TxnOffsetCommit carries the member id and epoch, checked like OffsetCommit's)."""
    b = start_broker(CONSUMER_GROUPS)
    create_topic(b.bootstrap, "eos-in", 1)
    create_topic(b.bootstrap, "eos-out", 1)
    produce(b.bootstrap, "eos-in", 1, 10)
    c = Consumer({**COMMON, "bootstrap.servers": b.bootstrap, "group.id": "g-eos", "group.protocol": "consumer",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False, "isolation.level": "read_committed"})
    p = Producer({**COMMON, "bootstrap.servers": b.bootstrap, "transactional.id": "eos-copier"})
    try:
        c.subscribe(["eos-in"])
        p.init_transactions(30)
        got = []
        deadline = time.monotonic() + 60
        while len(got) < 10 and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and not m.error():
                got.append(m)
        assert len(got) == 10
        p.begin_transaction()
        for m in got:
            p.produce("eos-out", m.value(), partition=0)
        p.send_offsets_to_transaction([TopicPartition("eos-in", 0, got[-1].offset() + 1)],
                                      c.consumer_group_metadata(), 30)
        p.commit_transaction(30)
        assert committed_offsets(b.port, "g-eos") == {("eos-in", 0): 10}
    finally:
        c.close()


def test_group_configs_set_the_heartbeat_interval_and_session_timeout_within_the_bounds(start_broker, member):
    """consumer.heartbeat.interval.ms / consumer.session.timeout.ms of one group (GROUP resource), within the
    broker's group.consumer.min/max.* bounds: told in its heartbeats, its members fenced after its timeout."""
    b = start_broker({**CONSUMER_GROUPS, "group.consumer.session.timeout.ms": 30000})
    create_topic(b.bootstrap, "gc", 2)
    with WireClient(b.port) as c:
        for refused in ({"consumer.heartbeat.interval.ms": "50"}, {"consumer.heartbeat.interval.ms": "20000"},
                        {"consumer.session.timeout.ms": "1000"}, {"consumer.session.timeout.ms": "70000"},
                        {"consumer.session.timeout.ms": "6000", "consumer.heartbeat.interval.ms": "7000"},
                        {"consumer.heartbeat.interval.ms": "soon"}, {"consumer.no.such.config": "1"}):
            assert alter_group_configs(c, "g-conf", refused)[0] == 40, refused  # INVALID_CONFIG
        assert alter_group_configs(c, "", {"consumer.heartbeat.interval.ms": "300"})[0] == 42  # no default group
        assert alter_group_configs(c, "g-conf", {"consumer.heartbeat.interval.ms": "300",
                                                 "consumer.session.timeout.ms": "6000"}) == (0, None)
        configs = describe_group_configs(c, "g-conf")
        assert configs["consumer.heartbeat.interval.ms"] == ("300", 8)  # GROUP_CONFIG
        assert configs["consumer.session.timeout.ms"] == ("6000", 8)
        assert describe_group_configs(c, "g-other")["consumer.session.timeout.ms"] == ("30000", 5)  # DEFAULT
        silent = heartbeat(c, "g-conf", "m-silent", 0, topics=["gc"], owned=[])
        assert silent["error_code"] == 0 and silent["heartbeat_interval_ms"] == 300, silent
        other = heartbeat(c, "g-other", "m-1", 0, topics=["gc"], owned=[])
        assert other["heartbeat_interval_ms"] == 500
    # a confluent-kafka member shares the group with one that stops heartbeating: the group's 6 s session
    # (not the broker's 30 s) hands it every partition
    joined = time.monotonic()
    m = member(b.bootstrap, "g-conf", ["gc"])
    wait_until(lambda: m.snapshot()[0] == {("gc", 0), ("gc", 1)}, 25, "the silent member fenced")
    assert time.monotonic() - joined < 25
    assert "m-silent" not in [x["member_id"] for x in describe(b.port, "g-conf")["members"]]
    m.stop()
    b.restart()
    with WireClient(b.port) as c:
        assert describe_group_configs(c, "g-conf")["consumer.heartbeat.interval.ms"] == ("300", 8)
        # they go with the group
        deleted = c.request("DeleteGroups", 2, {"groups_names": ["g-conf"]})
        assert [r["error_code"] for r in deleted["results"]] == [0], deleted
        assert describe_group_configs(c, "g-conf")["consumer.heartbeat.interval.ms"] == ("500", 5)
