"""KIP-848 consumer groups in process: the assignors, reconciliation, and replay of the group's records."""

from __future__ import annotations

import uuid

from broker.group import consumer_records as cr
from broker.group import records
from broker.group.assignors import AssignmentSpec, range_, uniform
from broker.group.consumer_group import ConsumerGroup, ConsumerMember, MemberState, reconcile
from broker.group.manager import replay_partition
from broker.group.metadata import GroupMetadata, GroupState, MemberMetadata
from group.test_replay import log_of

A, B = uuid.UUID(int=1), uuid.UUID(int=2)


def counts(assignment: dict) -> dict:
    return {m: len(tps) for m, tps in assignment.items()}


def test_uniform_balances_and_moves_only_what_must_move():
    topics = {"a": (A, 7), "b": (B, 5)}
    two = uniform(AssignmentSpec(topics, {"m1": {"a", "b"}, "m2": {"a", "b"}}, {}))
    assert sorted(counts(two).values()) == [6, 6]
    three = uniform(AssignmentSpec(topics, {"m1": {"a", "b"}, "m2": {"a", "b"}, "m3": {"a", "b"}}, two))
    assert sorted(counts(three).values()) == [4, 4, 4]
    moved = sum(len(two[m] - three[m]) for m in two)
    assert moved == 4  # exactly the new member's share, taken from the others
    assert two["m1"] >= three["m1"] and two["m2"] >= three["m2"]
    back = uniform(AssignmentSpec(topics, {"m1": {"a", "b"}, "m2": {"a", "b"}}, {m: three[m] for m in ("m1", "m2")}))
    assert back["m1"] >= three["m1"] and back["m2"] >= three["m2"]  # the leaver's partitions, nothing else


def test_uniform_gives_partitions_only_to_subscribers():
    result = uniform(AssignmentSpec({"a": (A, 4), "b": (B, 4)}, {"m1": {"a"}, "m2": {"a", "b"}}, {}))
    assert {t for t, _ in result["m1"]} == {A}
    assert result["m1"] | result["m2"] == {(A, p) for p in range(4)} | {(B, p) for p in range(4)}
    assert not result["m1"] & result["m2"]


def test_range_gives_contiguous_co_partitioned_ranges():
    result = range_(AssignmentSpec({"a": (A, 5), "b": (B, 5)}, {"m2": {"a", "b"}, "m1": {"a", "b"}}, {}))
    assert result["m1"] == {(A, 0), (A, 1), (A, 2), (B, 0), (B, 1), (B, 2)}
    assert result["m2"] == {(A, 3), (A, 4), (B, 3), (B, 4)}


def test_a_partition_is_revoked_before_it_is_assigned_elsewhere():
    everything = frozenset((A, p) for p in range(4))
    first = ConsumerMember("m1", member_epoch=1, assigned=everything)
    second = ConsumerMember("m2")
    group = ConsumerGroup()
    group.add(first)
    group.add(second)
    keep, give = frozenset({(A, 0), (A, 1)}), frozenset({(A, 2), (A, 3)})

    step = reconcile(first, 2, keep, group.owners(), owned=everything)
    assert step.state == MemberState.UNREVOKED_PARTITIONS and step.member_epoch == 1
    assert step.assigned == keep and step.pending_revocation == give
    first.set_current(step)

    waiting = reconcile(second, 2, give, group.owners(), owned=frozenset())
    assert waiting.state == MemberState.UNRELEASED_PARTITIONS and waiting.assigned == frozenset()
    second.set_current(waiting)

    assert reconcile(first, 2, keep, group.owners(), owned=everything) == first.current()  # not revoked yet
    first.set_current(reconcile(first, 2, keep, group.owners(), owned=keep))
    assert first.state == MemberState.STABLE and first.member_epoch == 2 and first.previous_member_epoch == 1

    second.set_current(reconcile(second, 2, give, group.owners(), owned=frozenset()))
    assert second.state == MemberState.STABLE and second.assigned == give and second.member_epoch == 2


def test_the_records_replay_to_the_same_group():
    static = ConsumerMember("m1", instance_id="i-1", client_id="c", client_host="/h", subscribed_topic_names=("a",),
                            rebalance_timeout_ms=30000, server_assignor="range", member_epoch=3,
                            previous_member_epoch=2, state=MemberState.UNREVOKED_PARTITIONS,
                            assigned=frozenset({(A, 0)}), pending_revocation=frozenset({(A, 1)}))
    gone = ConsumerMember("m2", subscribed_topic_regex="a.*")
    batch = [cr.group_epoch("g", 4), cr.member_metadata("g", static), cr.member_metadata("g", gone),
             cr.target_assignment("g", "m1", frozenset({(A, 0)})), cr.target_assignment("g", "m2", frozenset({(A, 1)})),
             cr.assignment_epoch("g", 4), cr.current_assignment("g", static), cr.current_assignment("g", gone),
             *cr.member_tombstones("g", "m2")]
    group = replay_partition("p", log_of(("batch", batch, None)))["g"].consumer
    assert (group.group_epoch, group.assignment_epoch) == (4, 4)
    assert list(group.members) == ["m1"] and group.static_members == {"i-1": "m1"}
    assert group.target == {"m1": frozenset({(A, 0)})}
    m = group.members["m1"]
    assert m.metadata() == static.metadata() and m.current() == static.current()

    deleted = replay_partition("p", log_of(("batch", batch + cr.member_tombstones("g", "m1") + cr.group_tombstones("g"),
                                            None)))
    assert "g" not in deleted


def test_an_upgrade_and_a_downgrade_replay_to_the_kind_of_group_written_last():
    classic = GroupMetadata("g", 0)
    classic.protocol_type, classic.protocol_name, classic.generation_id, classic.leader_id = "consumer", "range", 5, "m1"
    classic.members["m1"] = MemberMetadata("m1", None, "c", "/h", 30000, 10000, "consumer", [("range", b"sub")])
    classic_record = (records.group_metadata_key("g"), records.group_metadata_value(classic, {"m1": b"asg"}))
    member = ConsumerMember("m1", subscribed_topic_names=("a",), member_epoch=5, previous_member_epoch=5,
                            classic_session_timeout_ms=10000, classic_protocols=[("range", b"sub")])
    upgrade = [(records.group_metadata_key("g"), None), cr.group_epoch("g", 5), cr.member_metadata("g", member),
               cr.target_assignment("g", "m1", frozenset()), cr.current_assignment("g", member), cr.assignment_epoch("g", 5)]
    upgraded = replay_partition("p", log_of(("batch", [classic_record], None), ("batch", upgrade, None)))["g"]
    assert upgraded.consumer.members["m1"].classic_protocols == [("range", b"sub")]
    assert upgraded.state == GroupState.EMPTY and not upgraded.members  # no classic members left

    downgrade = [*cr.member_tombstones("g", "m1"), *cr.group_tombstones("g"), classic_record]
    downgraded = replay_partition("p", log_of(("batch", [classic_record], None), ("batch", upgrade, None),
                                              ("batch", downgrade, None)))["g"]
    assert downgraded.consumer is None
    assert downgraded.state == GroupState.STABLE and list(downgraded.members) == ["m1"]
