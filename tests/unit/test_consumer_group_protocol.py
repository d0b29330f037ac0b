"""KIP-848 consumer groups through ConsumerGroupHeartbeat in process (broker/group/consumer_coordinator.py):
group and member epochs, a target assignment per group epoch, reconciliation that revokes before it
assigns, and session and rebalance timeouts fired by the fake clock."""

from __future__ import annotations

import uuid

import pytest

from broker.config.broker_config import BrokerConfig
from broker.config.group_configs import GroupConfigs
from broker.coordinator.partitions import ACTIVE
from broker.errors import ErrorCode
from broker.group.consumer_group import ConsumerGroup, ConsumerMember, MemberState, reconcile
from broker.group.coordinator import GroupCoordinator

from .test_classic_group import Manager

SESSION_S, REBALANCE_MS = 45, 30_000
LEAVE = -1


@pytest.fixture
def groups(tmp_path, logs, fake_clock):
    logs.create_topic("t", 4)
    config = BrokerConfig({"log.dirs": str(tmp_path / "data")})
    coordinator = GroupCoordinator(logs, None, config, lambda *args: None, None, GroupConfigs(config))
    coordinator.manager = Manager(coordinator.manager)
    coordinator.partitions.states = {p: (ACTIVE, 0) for p in range(config["offsets.topic.num.partitions"])}
    coordinator.topic_id = logs.topic("t").topic_id
    return coordinator


def heartbeat(groups, member_id="", epoch=0, owned=(), topics=("t",), instance_id=None, full=None):
    """One ConsumerGroupHeartbeat (v0); ``owned``: the partitions of "t" the member says it holds."""
    first = epoch == 0
    request = {"group_id": "g", "member_id": member_id, "member_epoch": epoch, "instance_id": instance_id,
               "rack_id": None, "rebalance_timeout_ms": REBALANCE_MS if first or full else -1,
               "subscribed_topic_names": list(topics) if first or full else None, "subscribed_topic_regex": None,
               "server_assignor": None,
               "topic_partitions": [] if first else (None if owned is None else [
                   {"topic_id": groups.topic_id, "partitions": sorted(owned)}] if owned else [])}
    return groups.consumer.heartbeat(request, 0, "client", "/127.0.0.1")


def partitions(response) -> set[int]:
    return {p for t in response["assignment"]["topic_partitions"] for p in t["partitions"]}


def group(groups) -> ConsumerGroup:
    return groups.groups["g"].consumer


def test_the_first_member_gets_every_partition_at_group_epoch_1(groups):
    response = heartbeat(groups)
    assert response["error_code"] == 0 and response["member_epoch"] == 1
    assert partitions(response) == {0, 1, 2, 3}
    assert group(groups).state() == "Stable" and group(groups).group_epoch == 1


def test_a_second_member_bumps_the_group_epoch_and_waits_for_revocation(groups):
    a = heartbeat(groups)
    b = heartbeat(groups)
    g = group(groups)
    assert g.group_epoch == 2 and g.assignment_epoch == 2 and g.state() == "Reconciling"
    assert b["member_epoch"] == 2 and partitions(b) == set(), "its partitions are still a's"
    a2 = heartbeat(groups, a["member_id"], 1, owned={0, 1, 2, 3})
    kept = partitions(a2)
    assert len(kept) == 2 and a2["member_epoch"] == 1, "revoking: a keeps its epoch until it confirms"
    assert g.members[a["member_id"]].state == MemberState.UNREVOKED_PARTITIONS
    a3 = heartbeat(groups, a["member_id"], 1, owned=kept)
    assert a3["member_epoch"] == 2
    b2 = heartbeat(groups, b["member_id"], 2, owned=set())
    assert partitions(b2) == {0, 1, 2, 3} - kept and g.state() == "Stable"


def test_a_member_that_stops_heartbeating_is_fenced_at_the_session_timeout(groups, fake_clock):
    a = heartbeat(groups)
    b = heartbeat(groups)
    fake_clock.advance(SESSION_S - 1)
    heartbeat(groups, b["member_id"], 2, owned=set())
    fake_clock.advance(1)
    g = group(groups)
    assert a["member_id"] not in g.members and g.group_epoch == 3
    assert g.target[b["member_id"]] == frozenset((groups.topic_id, p) for p in range(4))


def test_heartbeats_keep_a_member_for_good(groups, fake_clock):
    a = heartbeat(groups)
    for _ in range(10):
        fake_clock.advance(SESSION_S - 1)
        assert heartbeat(groups, a["member_id"], 1, owned=None)["error_code"] == 0
    assert list(group(groups).members) == [a["member_id"]]


def test_a_member_that_does_not_revoke_in_time_is_fenced_at_the_rebalance_timeout(groups, fake_clock):
    a = heartbeat(groups)
    b = heartbeat(groups)
    heartbeat(groups, a["member_id"], 1, owned={0, 1, 2, 3})  # told to revoke
    for _ in range(int(REBALANCE_MS / 1000 / 10) - 1):
        fake_clock.advance(10)
        heartbeat(groups, a["member_id"], 1, owned={0, 1, 2, 3})  # still holds them
        heartbeat(groups, b["member_id"], 2, owned=set())
    assert a["member_id"] in group(groups).members
    fake_clock.advance(10)
    assert a["member_id"] not in group(groups).members
    assert partitions(heartbeat(groups, b["member_id"], 2, owned=set())) == {0, 1, 2, 3}


def test_a_leaving_member_bumps_the_epoch_and_its_partitions_go_to_the_others(groups):
    a = heartbeat(groups)
    b = heartbeat(groups)
    left = heartbeat(groups, b["member_id"], LEAVE)
    assert left["error_code"] == 0 and left["member_epoch"] == LEAVE
    g = group(groups)
    assert list(g.members) == [a["member_id"]] and g.group_epoch == 3
    assert heartbeat(groups, a["member_id"], 1, owned={0, 1, 2, 3})["member_epoch"] == 3


def test_the_last_member_leaving_empties_the_group(groups):
    a = heartbeat(groups)
    heartbeat(groups, a["member_id"], LEAVE)
    assert group(groups).state() == "Empty"


@pytest.mark.parametrize("epoch,error", [(5, ErrorCode.FENCED_MEMBER_EPOCH), (1, ErrorCode.NONE)])
def test_a_member_epoch_ahead_of_the_coordinators_is_fenced(groups, epoch, error):
    a = heartbeat(groups)
    assert heartbeat(groups, a["member_id"], epoch, owned={0, 1, 2, 3})["error_code"] == error


def test_an_unknown_member_is_told_so(groups):
    heartbeat(groups)
    assert heartbeat(groups, "nobody", 1, owned=set())["error_code"] == ErrorCode.UNKNOWN_MEMBER_ID


def test_a_retry_at_the_previous_epoch_holding_a_subset_is_accepted(groups):
    a = heartbeat(groups)
    b = heartbeat(groups)
    a2 = heartbeat(groups, a["member_id"], 1, owned={0, 1, 2, 3})
    kept = partitions(a2)
    heartbeat(groups, a["member_id"], 1, owned=kept)  # now at epoch 2, previous 1
    assert heartbeat(groups, a["member_id"], 1, owned=kept)["error_code"] == 0
    assert heartbeat(groups, a["member_id"], 1, owned={0, 1, 2, 3})["error_code"] == ErrorCode.FENCED_MEMBER_EPOCH
    assert b["member_id"] in group(groups).members


def test_a_static_member_returning_takes_over_its_assignment(groups):
    a = heartbeat(groups, instance_id="i-1")
    heartbeat(groups, a["member_id"], -2, instance_id="i-1")  # a static member leaving for now
    back = heartbeat(groups, instance_id="i-1")
    assert back["member_id"] != a["member_id"] and partitions(back) == {0, 1, 2, 3}
    assert group(groups).group_epoch == 1, "nothing moved"


def test_a_static_instance_in_use_is_refused(groups):
    heartbeat(groups, instance_id="i-1")
    assert heartbeat(groups, instance_id="i-1")["error_code"] == ErrorCode.UNRELEASED_INSTANCE_ID


def test_the_first_heartbeat_must_carry_a_subscription(groups):
    assert heartbeat(groups, topics=())["error_code"] == ErrorCode.INVALID_REQUEST


# --- reconcile, the member's next step (Kafka's CurrentAssignmentBuilder) -------------------------------

T = uuid.UUID(int=7)


def tps(*ps) -> frozenset:
    return frozenset((T, p) for p in ps)


def test_a_stable_member_at_the_target_epoch_does_not_move():
    member = ConsumerMember("m", member_epoch=3, assigned=tps(0, 1))
    assert reconcile(member, 3, tps(0), {}, None) == member.current()


def test_a_partition_held_by_another_member_is_not_assigned_yet():
    member = ConsumerMember("m", member_epoch=1)
    step = reconcile(member, 2, tps(0, 1), {(T, 1): "other"}, owned=tps())
    assert step.assigned == tps(0) and step.state == MemberState.UNRELEASED_PARTITIONS and step.member_epoch == 2


def test_a_member_gets_its_partitions_once_released():
    member = ConsumerMember("m", member_epoch=2, previous_member_epoch=1,
                            state=MemberState.UNRELEASED_PARTITIONS, assigned=tps(0))
    step = reconcile(member, 2, tps(0, 1), {(T, 0): "m"}, owned=tps(0))
    assert step.assigned == tps(0, 1) and step.state == MemberState.STABLE


def test_a_member_revoking_keeps_its_epoch_until_its_heartbeat_drops_them():
    member = ConsumerMember("m", member_epoch=1, state=MemberState.UNREVOKED_PARTITIONS, assigned=tps(0),
                            pending_revocation=tps(1))
    assert reconcile(member, 2, tps(0), {}, owned=tps(0, 1)) == member.current()
    done = reconcile(member, 2, tps(0), {}, owned=tps(0))
    assert done.member_epoch == 2 and done.previous_member_epoch == 1 and done.pending_revocation == frozenset()
