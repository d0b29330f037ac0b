"""The classic group protocol's coordinator (broker/group/coordinator.py) in process: Empty ->
PreparingRebalance -> CompletingRebalance -> Stable, and every deadline (initial rebalance delay, rebalance
and sync timeouts, session expiry, offset retention) fired by the fake clock."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from broker.config.broker_config import BrokerConfig
from broker.coordinator.partitions import ACTIVE
from broker.errors import ErrorCode
from broker.group.coordinator import GroupCoordinator
from broker.group.metadata import CommittedOffset, GroupMetadata, GroupState, MemberMetadata
from storage import clock

from .conftest import run as bounded

EMPTY, PREPARING = GroupState.EMPTY, GroupState.PREPARING_REBALANCE
COMPLETING, STABLE, DEAD = GroupState.COMPLETING_REBALANCE, GroupState.STABLE, GroupState.DEAD
SESSION_MS, REBALANCE_MS, DELAY_MS = 10_000, 60_000, 3_000


class Manager:
    """The coordinator's persistence (GroupMetadataManager): every write succeeds and is recorded."""

    def __init__(self, real) -> None:
        self.partition_for = real.partition_for
        self.stored: list[tuple[str, int, dict]] = []
        self.removed: list = []

    def store_group(self, group, assignment) -> ErrorCode:
        self.stored.append((group.group_id, group.generation_id, dict(assignment)))
        return ErrorCode.NONE

    def store_records(self, group_id, batch) -> ErrorCode:
        return ErrorCode.NONE

    def committed(self, group_id, error=ErrorCode.NONE):
        return error

    def remove(self, group, partitions, group_tombstone) -> ErrorCode:
        self.removed.append((group.group_id, sorted(partitions), group_tombstone))
        for tp in partitions:
            group.offsets.pop(tp, None)
        return ErrorCode.NONE


@pytest.fixture
def coordinator(fake_clock):
    return make_coordinator()


def make_coordinator(**settings):
    config = BrokerConfig({"group.initial.rebalance.delay.ms": str(DELAY_MS), **settings})
    coordinator = GroupCoordinator(None, None, config, lambda *args: None, None, None)
    coordinator.manager = Manager(coordinator.manager)
    coordinator.partitions.states = {p: (ACTIVE, 0) for p in range(config["offsets.topic.num.partitions"])}
    return coordinator


_clients = itertools.count()


def joining(member_id="", session_ms=SESSION_MS, protocols=(("range", b"r"),), instance_id=None,
            rebalance_ms=REBALANCE_MS) -> MemberMetadata:
    return MemberMetadata(member_id, instance_id, f"client-{next(_clients)}", "/127.0.0.1", rebalance_ms,
                          session_ms, "consumer", list(protocols))


def join(coordinator, group="g", **kw) -> asyncio.Future:
    return coordinator.join_group(group, joining(**kw), require_known_member_id=False, supports_skip_assignment=False)


def sync(coordinator, result, assignments=None, group="g"):
    return coordinator.sync_group(group, result.generation_id, result.member_id, None, "consumer", "range",
                                  assignments or {})


def run(fake_clock, body):
    """``body()`` on a fresh loop, bounded in real time (conftest.run)."""
    return bounded(body())


def first_generation_s(members: int) -> float:
    """Members that joined together: a second one extends the initial delay once."""
    return DELAY_MS / 1000 * (1 if members == 1 else 2)


async def stable_group(coordinator, fake_clock, members=1):
    """A group of ``members`` through its first rebalance: the members' join results."""
    joins = [join(coordinator) for _ in range(members)]
    await fake_clock.run_for(first_generation_s(members))
    results = [await j for j in joins]
    leader = next(r for r in results if r.member_id == r.leader_id)
    syncs = [sync(coordinator, r, {m.member_id: m.member_id.encode() for m in results} if r is leader else None)
             for r in results]
    for s in syncs:
        await s
    return results


def test_the_first_member_waits_out_the_initial_rebalance_delay(coordinator, fake_clock):
    async def body():
        joined = join(coordinator)
        assert coordinator.groups["g"].state is PREPARING
        await fake_clock.run_for(DELAY_MS / 1000 - 0.01)
        assert not joined.done()
        await fake_clock.run_for(0.01)
        result = await joined
        group = coordinator.groups["g"]
        assert result.error == ErrorCode.NONE and result.generation_id == 1
        assert result.leader_id == result.member_id and group.state is COMPLETING
        assert group.protocol_name == "range"

    run(fake_clock, body)


def test_members_arriving_during_the_delay_extend_it_and_join_one_generation(coordinator, fake_clock):
    async def body():
        first = join(coordinator)
        await fake_clock.run_for(2)
        second = join(coordinator)
        await fake_clock.run_for(1)
        assert not first.done(), "a member arrived: the delay goes on"
        await fake_clock.run_for(DELAY_MS / 1000)
        a, b = await first, await second
        assert a.generation_id == b.generation_id == 1 and a.leader_id == b.leader_id
        assert len(coordinator.groups["g"].members) == 2

    run(fake_clock, body)


def test_the_leaders_sync_makes_the_group_stable_and_hands_out_assignments(coordinator, fake_clock):
    async def body():
        a, b = await stable_group(coordinator, fake_clock, 2)
        group = coordinator.groups["g"]
        assert group.state is STABLE
        assert group.members[a.member_id].assignment == a.member_id.encode()
        assert coordinator.manager.stored[-1][1] == 1

    run(fake_clock, body)


def test_a_follower_sync_waits_for_the_leaders(coordinator, fake_clock):
    async def body():
        joins = [join(coordinator), join(coordinator)]
        await fake_clock.run_for(first_generation_s(2))
        results = [await j for j in joins]
        follower = next(r for r in results if r.member_id != r.leader_id)
        leader = next(r for r in results if r.member_id == r.leader_id)
        waiting = sync(coordinator, follower)
        await asyncio.sleep(0)
        assert not waiting.done()
        await sync(coordinator, leader, {follower.member_id: b"yours"})
        answer = await waiting
        assert answer.error == ErrorCode.NONE and answer.assignment == b"yours"

    run(fake_clock, body)


def test_a_member_that_stops_heartbeating_is_removed_at_its_session_timeout(coordinator, fake_clock):
    async def body():
        (member,) = await stable_group(coordinator, fake_clock)
        group = coordinator.groups["g"]
        await fake_clock.run_for(SESSION_MS / 1000 - 0.1)
        assert member.member_id in group.members
        await fake_clock.run_for(0.1)
        assert group.members == {} and group.state is EMPTY and group.generation_id == 2

    run(fake_clock, body)


def test_heartbeats_keep_a_member_past_many_session_timeouts(coordinator, fake_clock):
    async def body():
        (member,) = await stable_group(coordinator, fake_clock)
        for _ in range(10):
            await fake_clock.run_for(SESSION_MS / 1000 / 2)
            assert coordinator.heartbeat("g", member.member_id, None, 1) == ErrorCode.NONE
        assert coordinator.groups["g"].state is STABLE

    run(fake_clock, body)


def test_heartbeat_errors(coordinator, fake_clock):
    async def body():
        (member,) = await stable_group(coordinator, fake_clock)
        assert coordinator.heartbeat("g", member.member_id, None, 7) == ErrorCode.ILLEGAL_GENERATION
        assert coordinator.heartbeat("g", "nobody", None, 1) == ErrorCode.UNKNOWN_MEMBER_ID
        assert coordinator.heartbeat("other", member.member_id, None, 1) == ErrorCode.UNKNOWN_MEMBER_ID
        join(coordinator)
        assert coordinator.heartbeat("g", member.member_id, None, 1) == ErrorCode.REBALANCE_IN_PROGRESS

    run(fake_clock, body)


def test_a_new_member_rebalances_a_stable_group_and_both_get_the_next_generation(coordinator, fake_clock):
    async def body():
        (first,) = await stable_group(coordinator, fake_clock)
        newcomer = join(coordinator)
        group = coordinator.groups["g"]
        assert group.state is PREPARING and not newcomer.done()
        rejoin = join(coordinator, member_id=first.member_id)
        a, b = await rejoin, await newcomer
        assert a.generation_id == b.generation_id == 2 and group.state is COMPLETING
        assert a.leader_id == first.member_id, "the leader that rejoined stays leader"

    run(fake_clock, body)


def test_a_member_that_does_not_rejoin_is_dropped_at_the_rebalance_timeout(coordinator, fake_clock):
    async def body():
        a, b = await stable_group(coordinator, fake_clock, 2)
        for member in (a, b):  # keep both alive while the rebalance waits
            coordinator.heartbeat("g", member.member_id, None, 1)
        rejoin = join(coordinator, member_id=a.member_id)
        beat_s = SESSION_MS / 1000 / 2
        for _ in range(int(REBALANCE_MS / 1000 / beat_s) - 1):  # b stays alive, but never rejoins
            await fake_clock.run_for(beat_s)
            assert coordinator.heartbeat("g", b.member_id, None, 1) == ErrorCode.REBALANCE_IN_PROGRESS
        assert not rejoin.done()
        await fake_clock.run_for(beat_s)
        result = await rejoin
        assert result.generation_id == 2 and list(coordinator.groups["g"].members) == [a.member_id]

    run(fake_clock, body)


def test_members_that_never_sync_are_dropped_at_the_rebalance_timeout(coordinator, fake_clock):
    async def body():
        # sessions longer than the rebalance timeout: the sync timeout, not a session, drops the follower
        joins = [join(coordinator, session_ms=3 * REBALANCE_MS), join(coordinator, session_ms=3 * REBALANCE_MS)]
        await fake_clock.run_for(first_generation_s(2))
        results = [await j for j in joins]
        leader = next(r for r in results if r.member_id == r.leader_id)
        follower = next(r for r in results if r is not leader)
        await sync(coordinator, leader, {})
        group = coordinator.groups["g"]
        assert group.state is STABLE and group.pending_sync == {follower.member_id}
        await fake_clock.run_for(REBALANCE_MS / 1000 - 1)
        assert follower.member_id in group.members
        await fake_clock.run_for(1)
        assert follower.member_id not in group.members and group.state is PREPARING
        assert leader.member_id in group.members

    run(fake_clock, body)


def test_a_new_member_asked_for_its_id_is_forgotten_after_its_session_timeout(coordinator, fake_clock):
    async def body():
        first = coordinator.join_group("g", joining(), require_known_member_id=True, supports_skip_assignment=False)
        result = await first
        assert result.error == ErrorCode.MEMBER_ID_REQUIRED and result.member_id
        group = coordinator.groups["g"]
        assert result.member_id in group.pending_members
        await fake_clock.run_for(SESSION_MS / 1000)
        assert group.pending_members == {}

    run(fake_clock, body)


@pytest.mark.parametrize("session_ms", [5, 60 * 60 * 1000])
def test_a_session_timeout_outside_the_brokers_bounds_is_refused(coordinator, fake_clock, session_ms):
    async def body():
        return (await join(coordinator, session_ms=session_ms)).error

    assert run(fake_clock, body) == ErrorCode.INVALID_SESSION_TIMEOUT


def test_a_member_without_a_common_protocol_is_refused(coordinator, fake_clock):
    async def body():
        join(coordinator)
        return (await join(coordinator, protocols=(("roundrobin", b""),))).error

    assert run(fake_clock, body) == ErrorCode.INCONSISTENT_GROUP_PROTOCOL


def test_the_protocol_most_members_prefer_among_the_common_ones_wins(coordinator, fake_clock):
    async def body():
        joins = [join(coordinator, protocols=(("range", b""), ("sticky", b""))),
                 join(coordinator, protocols=(("sticky", b""), ("range", b""), ("x", b""))),
                 join(coordinator, protocols=(("sticky", b""), ("range", b"")))]
        await fake_clock.run_for(first_generation_s(3))
        return {(await j).protocol_name for j in joins}

    assert run(fake_clock, body) == {"sticky"}


def test_a_group_of_another_brokers_partition_is_not_coordinated_here(coordinator, fake_clock):
    coordinator.partitions.states = {}

    async def body():
        return (await join(coordinator)).error

    assert run(fake_clock, body) == ErrorCode.NOT_COORDINATOR


def test_the_last_member_leaving_empties_the_group(coordinator, fake_clock):
    async def body():
        (member,) = await stable_group(coordinator, fake_clock)
        error, errors = coordinator.leave_group("g", [(member.member_id, None), ("nobody", None)])
        group = coordinator.groups["g"]
        assert error == ErrorCode.NONE and errors == [ErrorCode.NONE, ErrorCode.UNKNOWN_MEMBER_ID]
        assert group.state is EMPTY and group.members == {}
        await fake_clock.run_for(SESSION_MS / 1000)  # its session timer went with it
        assert group.generation_id == 2

    run(fake_clock, body)


def test_a_static_member_replaced_by_a_new_join_is_fenced(coordinator, fake_clock):
    async def body():
        first = join(coordinator, instance_id="i-1")
        await fake_clock.run_for(DELAY_MS / 1000)
        old = await first
        await sync(coordinator, old, {old.member_id: b"a"})
        again = await join(coordinator, instance_id="i-1")  # the same instance restarted
        assert again.member_id != old.member_id and coordinator.groups["g"].state is STABLE
        assert coordinator.heartbeat("g", old.member_id, "i-1", 1) == ErrorCode.FENCED_INSTANCE_ID

    run(fake_clock, body)


def test_empty_group_offsets_expire_after_the_retention_from_when_it_emptied(fake_clock):
    coordinator = make_coordinator(**{"offsets.retention.minutes": "1"})
    retention_ms = 60_000

    async def body():
        (member,) = await stable_group(coordinator, fake_clock)
        group = coordinator.groups["g"]
        group.offsets[("t", 0)] = CommittedOffset(5, -1, "", clock.wall_ms())
        for _ in range(3 * retention_ms // (SESSION_MS // 2)):  # stable, its subscription unknown: kept
            fake_clock.advance(SESSION_MS / 1000 / 2)
            assert coordinator.heartbeat("g", member.member_id, None, 1) == ErrorCode.NONE
            coordinator._check_retention()
        assert ("t", 0) in group.offsets
        coordinator.leave_group("g", [(member.member_id, None)])
        fake_clock.advance(retention_ms / 1000 - 1)
        coordinator._check_retention()
        assert ("t", 0) in group.offsets
        fake_clock.advance(1)
        coordinator._check_retention()
        assert "g" not in coordinator.groups, "empty with no offsets left: removed"
        assert coordinator.manager.removed[-1] == ("g", [("t", 0)], True)

    run(fake_clock, body)


# --- the state machine itself -------------------------------------------------------------------------

ALLOWED = {(EMPTY, PREPARING), (PREPARING, COMPLETING), (COMPLETING, STABLE), (STABLE, PREPARING),
           (COMPLETING, PREPARING), (PREPARING, EMPTY)} | {(s, DEAD) for s in GroupState}


@pytest.mark.parametrize("old,new", [(a, b) for a in GroupState for b in GroupState if a is not DEAD])
def test_only_kafkas_classic_transitions_are_allowed(old, new):
    group = GroupMetadata("g", 0)
    group.state = old
    if (old, new) in ALLOWED:
        group.transition_to(new, 5)
        assert group.state is new and group.state_timestamp == 5
    else:
        with pytest.raises(RuntimeError):
            group.transition_to(new, 5)


def test_a_transition_without_a_time_takes_the_clocks(fake_clock):
    group = GroupMetadata("g", 0)
    group.transition_to(PREPARING)
    assert group.state_timestamp == clock.wall_ms()
