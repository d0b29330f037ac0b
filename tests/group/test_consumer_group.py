"""KIP-848 consumer groups in process: the assignors, reconciliation, and replay of the group's records."""

from __future__ import annotations

import uuid

from broker.group import consumer_records as cr
from broker.group.assignors import AssignmentSpec, range_, uniform
from broker.group.consumer_group import ConsumerGroup, ConsumerMember, MemberState, reconcile
from broker.group.manager import replay_partition
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
