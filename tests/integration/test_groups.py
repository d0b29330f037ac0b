"""Consumer groups with real clients: membership, rebalancing, committed offsets.

confluent-kafka members run in their own processes where a test kills one
(SIGKILL, no LeaveGroup); kafka-python and aiokafka join, commit and resume;
committed offsets and the group's generation survive a broker kill -9.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from confluent_kafka import OFFSET_INVALID, ConsumerGroupState, ConsumerGroupTopicPartitions, KafkaError, TopicPartition

from helpers.groups import GROUP_BROKER, MemberProcess, TrackedConsumer, wait_until
from helpers.kafka import admin, create_topic, make_messages, produce_all

SESSION_TIMEOUT_S = 3.0  # what member_config asks for


def group_topic(start_broker, topic: str, partitions: int, messages: int = 0, seed: int = 0, overrides=None):
    """A broker set up for group tests, with ``topic`` holding ``messages`` produced messages."""
    b = start_broker(GROUP_BROKER, overrides or {})
    create_topic(b.bootstrap, topic, partitions=partitions)
    produced = make_messages(messages, partitions, seed=seed)
    if produced:
        produce_all(b.bootstrap, topic, produced)
    return b, produced


def owners_disjoint_and_complete(members, partitions: int, per_member: int | None = None) -> bool:
    owned = [m.assignment for m in members]
    union = set().union(*owned)
    complete = sum(map(len, owned)) == partitions and union == set(range(partitions))
    return complete and (per_member is None or all(len(o) == per_member for o in owned))


def end_offsets(messages, partitions: int) -> dict[int, int]:
    counts = {p: 0 for p in range(partitions)}
    for m in messages:
        counts[m.partition] += 1
    return counts


@pytest.mark.timeout(120)
def test_members_share_partitions_survive_a_kill_and_rebalance_on_join(start_broker, tmp_path):
    topic, group = "shared", "sharers"
    b, first = group_topic(start_broker, topic, 6, 600, seed=1)

    # slow processing, so a member dies with work in hand
    members = [MemberProcess(tmp_path, f"m{i}", b.bootstrap, group, topic, delay=0.01) for i in range(3)]
    try:
        wait_until(lambda: owners_disjoint_and_complete(members, 6, per_member=2), 30, "3 members owning 2 partitions each")
        victim = members[0]
        wait_until(lambda: len(victim.processed()) >= 30, 30, "the victim to process some messages")
        victim_partitions = victim.assignment
        victim.kill()
        killed_at = time.monotonic()
        survivors = members[1:]
        wait_until(lambda: owners_disjoint_and_complete(survivors, 6, per_member=3), SESSION_TIMEOUT_S + 10,
                   "the survivors to take over the killed member's partitions")
        takeover = time.monotonic() - killed_at
        assert victim_partitions <= set().union(*(m.assignment for m in survivors))

        second = make_messages(300, 6, seed=2)
        produce_all(b.bootstrap, topic, second)
        newcomer = MemberProcess(tmp_path, "m3", b.bootstrap, group, topic, delay=0.01)
        members.append(newcomer)
        live = [*survivors, newcomer]
        wait_until(lambda: owners_disjoint_and_complete(live, 6, per_member=2), 30, "a rebalance that includes the newcomer")

        ends = end_offsets(first + second, 6)
        expected = {(p, o) for p, end in ends.items() for o in range(end)}

        def processed():
            return {po for m in members for po in m.processed()}

        wait_until(lambda: processed() >= expected, 60, "every message to be processed")
        assert processed() == expected, f"processed offsets that were never produced: {sorted(processed() - expected)[:5]}"
        assert takeover < SESSION_TIMEOUT_S + 10
    finally:
        for m in members:
            m.stop()

    # commit after processing: the group's committed offsets are the ends, nothing was skipped
    a = admin(b.bootstrap)  # kept referenced: a destroyed client never answers its futures
    futures = a.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])
    committed = {tp.partition: tp.offset for tp in futures[group].result(10).topic_partitions}
    assert committed == ends
    print(f"takeover after SIGKILL: {takeover:.1f}s (session timeout {SESSION_TIMEOUT_S}s)")


@pytest.mark.timeout(90)
def test_cooperative_sticky_moves_only_what_it_must(start_broker):
    topic, group = "sticky", "stickies"
    b, messages = group_topic(start_broker, topic, 6, 120, seed=3)
    strategy = {"partition.assignment.strategy": "cooperative-sticky"}
    first = TrackedConsumer(b.bootstrap, group, topic, **strategy)
    second = None
    try:
        got = []
        wait_until(lambda: got.extend(first.poll(0.3)) or first.assignment == set(range(6)), 30, "the first member owning all 6")
        second = TrackedConsumer(b.bootstrap, group, topic, **strategy)

        def balanced():
            got.extend(first.poll(0.2))
            got.extend(second.poll(0.2))
            return owners_disjoint_and_complete([first, second], 6, per_member=3)

        wait_until(balanced, 40, "an incremental rebalance to 3 + 3")
        revoked = {p for kind, ps in first.events if kind == "revoke" for p in ps}
        # incremental: the first member gave up only what moved, and kept the rest throughout
        assert revoked == second.assignment, (first.events, second.events)
        wait_until(lambda: balanced() and len({(m.partition(), m.offset()) for m in got}) == len(messages), 30,
                   "every message consumed")
    finally:
        first.close()
        if second is not None:
            second.close()


def test_kafka_python_and_aiokafka_join_commit_and_resume(start_broker):
    from aiokafka import AIOKafkaConsumer
    from kafka import KafkaConsumer, OffsetAndMetadata
    from kafka import TopicPartition as KTopicPartition

    topic, group = "handover", "mixed-clients"
    b, messages = group_topic(start_broker, topic, 2, 40, seed=4)
    ends = end_offsets(messages, 2)

    # kafka-python processes the first 5 of each partition and commits them, with metadata
    kp = KafkaConsumer(topic, bootstrap_servers=b.bootstrap, group_id=group, enable_auto_commit=False,
                       auto_offset_reset="earliest", session_timeout_ms=6000, heartbeat_interval_ms=500)
    try:
        seen: dict[int, list[int]] = {0: [], 1: []}
        deadline = time.monotonic() + 30
        while any(len(v) < 5 for v in seen.values()):
            assert time.monotonic() < deadline, f"kafka-python got only {seen}"
            for tp, records in kp.poll(timeout_ms=500).items():
                seen[tp.partition].extend(r.offset for r in records)
        assert sorted(kp.assignment()) == [KTopicPartition(topic, 0), KTopicPartition(topic, 1)]
        kp.commit({KTopicPartition(topic, p): OffsetAndMetadata(5, "kafka-python", -1) for p in (0, 1)})
        assert kp.committed(KTopicPartition(topic, 0)) == 5
    finally:
        kp.close()

    async def resume_with_aiokafka():
        consumer = AIOKafkaConsumer(topic, bootstrap_servers=b.bootstrap, group_id=group, enable_auto_commit=False,
                                    auto_offset_reset="earliest", session_timeout_ms=6000, heartbeat_interval_ms=500)
        await consumer.start()
        try:
            got: dict[int, list[int]] = {0: [], 1: []}
            while sum(map(len, got.values())) < sum(ends.values()) - 10:
                batch = await asyncio.wait_for(consumer.getmany(timeout_ms=500), 30)
                for tp, records in batch.items():
                    got[tp.partition].extend(r.offset for r in records)
            await consumer.commit()
            return got
        finally:
            await consumer.stop()

    got = asyncio.run(asyncio.wait_for(resume_with_aiokafka(), 60))
    # resumed exactly at kafka-python's commit, and consumed the rest once
    assert got == {p: list(range(5, ends[p])) for p in (0, 1)}

    kp = KafkaConsumer(bootstrap_servers=b.bootstrap, group_id=group, enable_auto_commit=False)
    try:
        assert {p: kp.committed(KTopicPartition(topic, p)) for p in (0, 1)} == ends
    finally:
        kp.close()


@pytest.mark.timeout(90)
def test_commits_and_generation_survive_broker_kill_9(start_broker):
    topic, group = "durable-group", "survivors"
    b, messages = group_topic(start_broker, topic, 3, 90, seed=5)
    member = TrackedConsumer(b.bootstrap, group, topic, session_timeout_ms=10000)
    try:
        got = wait_until(lambda: member.poll(0.3), 30, "the first messages")
        wait_until(lambda: member.assignment == {0, 1, 2}, 10, "the member owning every partition")
        commits = {0: 7, 1: 11, 2: 30}  # partition 2 fully consumed
        member.consumer.commit(offsets=[TopicPartition(topic, p, o) for p, o in commits.items()], asynchronous=False)
        member_id = member.consumer.memberid()
        events_before = list(member.events)

        b.kill()
        b.start()
        # the member keeps its generation: heartbeats work again, no rebalance happens
        member.poll(4)
        assert member.consumer.memberid() == member_id
        assert member.events == events_before, f"rebalanced after the restart: {member.events[len(events_before):]}"
        a = admin(b.bootstrap)
        described = a.describe_consumer_groups([group])[group].result(10)
        assert described.state == ConsumerGroupState.STABLE
        assert [m.member_id for m in described.members] == [member_id]
        assert {tp.partition for tp in described.members[0].assignment.topic_partitions} == {0, 1, 2}
        assert got
    finally:
        member.close()

    # a new member resumes exactly at the committed offsets
    reader = TrackedConsumer(b.bootstrap, group, topic)
    try:
        first_seen: dict[int, int] = {}

        def read():
            for m in reader.poll(0.3):
                first_seen.setdefault(m.partition(), m.offset())
            return len(first_seen) == 2

        wait_until(read, 30, "the resumed member to read partitions 0 and 1")
        assert first_seen == {0: 7, 1: 11}
        committed = reader.consumer.committed([TopicPartition(topic, p) for p in range(3)], timeout=10)
        assert {tp.partition: tp.offset for tp in committed} == commits
    finally:
        reader.close()


def test_auto_offset_reset_without_commits_and_unknown_group_offsets(start_broker):
    topic = "resets"
    b, _ = group_topic(start_broker, topic, 1, 10, seed=6)
    earliest = TrackedConsumer(b.bootstrap, "fresh-earliest", topic, auto_offset_reset="earliest")
    latest = TrackedConsumer(b.bootstrap, "fresh-latest", topic, auto_offset_reset="latest")
    try:
        # a group with no commits has no offsets: OFFSET_INVALID, and no error
        committed = earliest.consumer.committed([TopicPartition(topic, 0)], timeout=10)
        assert committed[0].offset == OFFSET_INVALID and committed[0].error is None
        got = wait_until(lambda: earliest.poll(0.3), 30, "the earliest reader's first message")
        assert got[0].offset() == 0
        wait_until(lambda: latest.poll(0.2) or latest.assignment == {0}, 30, "the latest reader's assignment")
        time.sleep(1)  # let it fetch its starting position: the end
        assert latest.poll(0.5) == []
        produce_all(b.bootstrap, topic, make_messages(1, 1, seed=7))
        got = wait_until(lambda: latest.poll(0.3), 30, "the message produced after joining")
        assert [m.offset() for m in got] == [10]
    finally:
        earliest.close()
        latest.close()


@pytest.mark.timeout(90)
def test_admin_client_lists_describes_alters_and_deletes_groups(start_broker):
    topic = "administered"
    b, _ = group_topic(start_broker, topic, 2, 20, seed=8)
    a = admin(b.bootstrap)

    # a simple (assign-only) group made by committing offsets from the admin client
    offsets = [TopicPartition(topic, 0, 4), TopicPartition(topic, 1, 9)]
    a.alter_consumer_group_offsets([ConsumerGroupTopicPartitions("simple", offsets)])["simple"].result(10)
    active = TrackedConsumer(b.bootstrap, "active", topic, client_id="admin-test-member")
    try:
        wait_until(lambda: active.poll(0.2) or active.assignment == {0, 1}, 30, "the active member's assignment")
        listed = {g.group_id: g for g in a.list_consumer_groups().result(10).valid}
        assert listed["active"].state == ConsumerGroupState.STABLE
        assert listed["simple"].state == ConsumerGroupState.EMPTY
        stable_only = a.list_consumer_groups(states={ConsumerGroupState.STABLE}).result(10).valid
        assert [g.group_id for g in stable_only] == ["active"]

        described = a.describe_consumer_groups(["active", "simple", "never-existed"])
        d = described["active"].result(10)
        assert (d.state, d.partition_assignor, d.is_simple_consumer_group) == (ConsumerGroupState.STABLE, "range", False)
        (member,) = d.members
        assert member.client_id == "admin-test-member" and member.host.endswith("127.0.0.1")
        assert sorted(tp.partition for tp in member.assignment.topic_partitions) == [0, 1]
        assert described["simple"].result(10).state == ConsumerGroupState.EMPTY
        assert described["never-existed"].result(10).state == ConsumerGroupState.DEAD

        fetched = a.list_consumer_group_offsets([ConsumerGroupTopicPartitions("simple")])["simple"].result(10)
        assert sorted((tp.partition, tp.offset) for tp in fetched.topic_partitions) == [(0, 4), (1, 9)]

        with pytest.raises(Exception) as busy:
            a.delete_consumer_groups(["active"])["active"].result(10)
        assert busy.value.args[0].code() == KafkaError.NON_EMPTY_GROUP
    finally:
        active.close()

    a.delete_consumer_groups(["simple"])["simple"].result(10)
    with pytest.raises(Exception) as gone:
        a.delete_consumer_groups(["simple"])["simple"].result(10)
    assert gone.value.args[0].code() == KafkaError.GROUP_ID_NOT_FOUND
    fetched = a.list_consumer_group_offsets([ConsumerGroupTopicPartitions("simple", [TopicPartition(topic, 0)])])
    assert [tp.offset for tp in fetched["simple"].result(10).topic_partitions] == [OFFSET_INVALID]
    # the deletion is durable
    b.kill()
    b.start()
    a = admin(b.bootstrap)
    assert "simple" not in {g.group_id for g in a.list_consumer_groups().result(10).valid}


@pytest.mark.timeout(90)
def test_static_member_restart_does_not_rebalance_the_group(start_broker):
    topic, group = "statics", "static-group"
    b, _ = group_topic(start_broker, topic, 4)
    one = TrackedConsumer(b.bootstrap, group, topic, group_instance_id="one", session_timeout_ms=10000)
    two = TrackedConsumer(b.bootstrap, group, topic, group_instance_id="two", session_timeout_ms=10000)
    try:
        def settled(seconds=0.1):
            one.poll(seconds)
            two.poll(seconds)
            return owners_disjoint_and_complete([one, two], 4, per_member=2)

        wait_until(settled, 30, "two static members with 2 partitions each")
        assert settled(1)  # and no trailing rebalance
        before_one, before_two = list(one.events), two.assignment

        two.close()  # a static member sends no LeaveGroup: the group waits for it
        two = TrackedConsumer(b.bootstrap, group, topic, group_instance_id="two", session_timeout_ms=10000)
        wait_until(lambda: settled() and two.assignment, 30, "the restarted static member's assignment")
        settled(1)
        assert two.assignment == before_two
        assert one.events == before_one, f"the other member was rebalanced: {one.events[len(before_one):]}"
    finally:
        one.close()
        two.close()


@pytest.mark.timeout(60)
def test_offsets_of_empty_groups_expire_and_stay_expired(start_broker):
    topic = "expiring"
    retention = {"offsets.retention.minutes": 0, "offsets.retention.check.interval.ms": 300}
    b, _ = group_topic(start_broker, topic, 1, 5, seed=9, overrides=retention)
    a = admin(b.bootstrap)
    member = TrackedConsumer(b.bootstrap, "subscribed", topic)
    try:
        wait_until(lambda: member.poll(0.2) or member.assignment == {0}, 30, "the member's assignment")
        member.consumer.commit(offsets=[TopicPartition(topic, 0, 3)], asynchronous=False)
        a.alter_consumer_group_offsets([ConsumerGroupTopicPartitions("idle", [TopicPartition(topic, 0, 2)])])["idle"].result(10)

        def idle_offset():
            request = [ConsumerGroupTopicPartitions("idle", [TopicPartition(topic, 0)])]
            return a.list_consumer_group_offsets(request)["idle"].result(10).topic_partitions[0].offset

        wait_until(lambda: idle_offset() == OFFSET_INVALID, 10, "the idle group's offset to expire")
        wait_until(lambda: "idle" not in {g.group_id for g in a.list_consumer_groups().result(10).valid}, 10,
                   "the idle group, left without offsets, to be removed")
        member.poll(1)  # several retention checks: a stable group's offsets for its own topic stay
        assert member.consumer.committed([TopicPartition(topic, 0)], timeout=10)[0].offset == 3
    finally:
        member.close()
    b.kill()
    b.start()
    a = admin(b.bootstrap)  # a fresh client: the old one may be backing off its reconnects
    assert idle_offset() == OFFSET_INVALID
