"""A leader's Partition (broker/cluster/replica_manager.py): the high watermark is the lowest log end of
the ISR, a follower joins the ISR once caught up, and leaves it after replica.lag.time.max.ms without
catching up, measured by the fake clock."""

from __future__ import annotations

import asyncio

import pytest

from broker.cluster.metadata import PartitionState
from broker.errors import ErrorCode

from .conftest import run
from .replication import LAG_MS, Replica


@pytest.fixture
def leader(tmp_path, fake_clock):
    return Replica(tmp_path)


def test_the_high_watermark_waits_for_every_in_sync_follower(leader):
    assert leader.produce(3) == 3
    assert leader.hw == 0
    leader.fetch(2, 3)
    assert leader.hw == 0, "follower 3 has not fetched"
    leader.fetch(3, 2)
    assert leader.hw == 2
    leader.fetch(3, 3)
    assert leader.hw == 3


def test_the_high_watermark_never_goes_back(leader):
    leader.produce(2)
    leader.fetch(2, 2)
    leader.fetch(3, 2)
    leader.fetch(3, 1)  # a late, reordered fetch
    assert leader.hw == 2


def test_a_follower_outside_the_isr_does_not_hold_the_high_watermark_back(tmp_path, fake_clock):
    leader = Replica(tmp_path, isr=(1, 2))
    leader.produce(4)
    leader.fetch(2, 4)
    leader.fetch(3, 1)
    assert leader.hw == 4 and leader.store.proposals == []


def test_an_isr_of_the_leader_alone_commits_on_append(tmp_path, fake_clock):
    leader = Replica(tmp_path, isr=(1,))
    assert leader.produce(5) == 5 and leader.hw == 5


def test_a_fetch_past_the_leaders_end_tells_nothing(leader):
    leader.produce(1)
    leader.fetch(2, 9)
    leader.fetch(3, 1)
    assert leader.hw == 0 and leader.partition.followers[2].log_end_offset == -1


def test_a_caught_up_follower_joins_the_isr(tmp_path, fake_clock):
    leader = Replica(tmp_path, isr=(1, 2))

    async def main():
        leader.produce(3)
        leader.fetch(2, 3)
        leader.fetch(3, 1)
        await asyncio.sleep(0)
        assert leader.store.proposals == [], "3 is behind the high watermark"
        leader.fetch(3, 3)
        await asyncio.gather(*leader.tasks)

    run(main())
    assert leader.store.proposals == [(1, 2, 3)] and leader.isr == (1, 2, 3)
    assert leader.manager.isr_expands == 1


def test_joining_the_isr_needs_the_start_of_the_leaders_epoch(tmp_path, fake_clock):
    leader = Replica(tmp_path, isr=(1,))
    leader.produce(2)
    leader.apply(PartitionState(1, 2, (1,), (1, 2, 3)))  # a new epoch from offset 2
    leader.log.set_high_watermark(1)  # (as if a follower's state held it back)
    leader.fetch(2, 1)
    assert leader.store.proposals == [] and leader.partition.isr_change_pending is False


def test_a_follower_that_stops_fetching_leaves_the_isr_after_the_lag_time(leader, fake_clock):
    async def main():
        leader.produce(1)
        leader.fetch(2, 1)
        leader.fetch(3, 1)
        fake_clock.advance(LAG_MS / 1000 - 1)
        leader.fetch(2, 1)
        leader.manager.shrink_isrs()
        assert leader.store.proposals == []
        fake_clock.advance(2)
        leader.manager.shrink_isrs()
        await asyncio.gather(*leader.tasks)

    run(main())
    assert leader.store.proposals == [(1, 2)] and leader.isr == (1, 2)
    assert leader.manager.isr_shrinks == 1


def test_a_follower_that_keeps_fetching_the_end_is_never_lagging(leader, fake_clock):
    for _ in range(10):
        end = leader.produce(1)
        fake_clock.advance(LAG_MS / 1000 / 2)
        leader.fetch(2, end)
        leader.fetch(3, end)
    assert leader.partition.lagging_isr_members(LAG_MS) == []


def test_a_follower_fetching_behind_the_end_is_lagging_once_the_lag_time_passes(leader, fake_clock):
    for _ in range(4):
        leader.produce(5)
        fake_clock.advance(10)
        leader.fetch(2, leader.log.log_end_offset)
        leader.fetch(3, 1)  # never reaches even the end the leader had at its last fetch
    assert leader.partition.lagging_isr_members(LAG_MS) == [3]


def test_reaching_the_end_seen_at_the_last_fetch_counts_as_caught_up_then(leader, fake_clock):
    fake_clock.advance(10)
    leader.produce(5)
    leader.fetch(3, 2)  # at 10 s; the leader's end is 5
    fake_clock.advance(20)
    leader.produce(5)
    leader.fetch(3, 5)  # behind the end (10) but at the end of its last fetch: caught up as of 10 s
    fake_clock.advance(5)
    assert leader.partition.lagging_isr_members(LAG_MS) == [2], "2 never fetched: caught up at 0 s"
    fake_clock.advance(10)
    assert leader.partition.lagging_isr_members(LAG_MS) == [2, 3]


def test_a_new_leader_gives_every_follower_the_lag_time_from_now(leader, fake_clock):
    fake_clock.advance(LAG_MS)
    leader.apply(PartitionState(1, 2, (1, 2, 3), (1, 2, 3)))
    fake_clock.advance(LAG_MS / 1000 - 1)
    assert leader.partition.lagging_isr_members(LAG_MS) == []
    fake_clock.advance(2)
    assert leader.partition.lagging_isr_members(LAG_MS) == [2, 3]


def test_a_shrunk_isr_lets_the_high_watermark_move(leader, fake_clock):
    async def main():
        leader.produce(4)
        leader.fetch(2, 4)
        assert leader.hw == 0
        fake_clock.advance(LAG_MS / 1000 + 1)
        leader.fetch(2, 4)
        leader.manager.shrink_isrs()
        await asyncio.gather(*leader.tasks)

    run(main())
    assert leader.isr == (1, 2) and leader.hw == 4


def test_a_proposed_isr_counts_for_the_high_watermark_until_it_is_written(tmp_path, fake_clock):
    leader = Replica(tmp_path, isr=(1, 2))
    leader.store.hold = True

    async def main():
        leader.produce(3)
        leader.fetch(2, 3)
        leader.fetch(3, 1)  # behind the high watermark (3): not proposed
        assert leader.hw == 3 and leader.store.proposals == []
        leader.produce(2)
        leader.fetch(3, 3)  # caught up to the high watermark: proposed
        await asyncio.sleep(0)
        leader.fetch(2, 5)
        assert leader.store.proposals == [(1, 2, 3)] and leader.isr == (1, 2)
        assert leader.hw == 3, "3 may already be in the stored ISR: its end holds the high watermark"
        for task in leader.tasks:
            task.cancel()

    run(main())


def test_one_isr_change_at_a_time(leader, fake_clock):
    leader.store.hold = True

    async def main():
        fake_clock.advance(LAG_MS / 1000 + 1)
        leader.fetch(2, 0)
        leader.manager.shrink_isrs()
        leader.manager.shrink_isrs()
        await asyncio.sleep(0)
        for task in leader.tasks:
            task.cancel()

    run(main())
    assert leader.store.proposals == [(1, 2)]


def test_only_a_leader_shrinks_isrs(tmp_path, fake_clock):
    follower = Replica(tmp_path, node_id=2, leader=1)
    fake_clock.advance(LAG_MS)
    follower.manager.shrink_isrs()
    assert follower.store.proposals == [] and not follower.partition.is_leader


def test_losing_leadership_forgets_the_followers(leader):
    leader.partition.apply(PartitionState(2, 2, (1, 2, 3), (1, 2, 3)))
    assert leader.partition.followers == {} and leader.partition.epoch_start_offset is None
    assert leader.leadership[-1] == ("t", 0, False, 2)


def test_becoming_leader_records_where_its_epoch_starts(tmp_path, fake_clock):
    replica = Replica(tmp_path, node_id=2)
    replica.produce(3)
    replica.apply(PartitionState(2, 4, (1, 2, 3), (1, 2, 3)))
    assert replica.partition.epoch_start_offset == 3
    assert replica.log.leader_epochs.entries[-1].epoch == 4
    assert replica.leadership[-1] == ("t", 0, True, 4)


@pytest.mark.parametrize("asked,expected", [(-1, ErrorCode.NONE), (1, ErrorCode.NONE),
                                            (0, ErrorCode.FENCED_LEADER_EPOCH), (2, ErrorCode.UNKNOWN_LEADER_EPOCH)])
def test_a_requests_leader_epoch_is_checked(leader, asked, expected):
    assert leader.partition.check_epoch(asked) == expected


def test_a_follower_caught_up_while_an_isr_change_was_pending_joins_at_the_periodic_check(tmp_path, fake_clock):
    leader = Replica(tmp_path, isr=(1, 2))

    async def main():
        leader.produce(2)
        leader.partition.isr_change_pending = True  # another change of this partition is being written
        leader.fetch(2, 2)
        leader.fetch(3, 2)  # caught up: its proposal is dropped while the other is pending
        assert leader.store.proposals == []
        leader.partition.isr_change_pending = False
        leader.manager.shrink_isrs()  # no fetch of it names the partition again (idle): the check adds it
        await asyncio.gather(*leader.tasks)

    run(main())
    assert leader.isr == (1, 2, 3)


def test_the_periodic_check_adds_no_follower_that_is_behind(tmp_path, fake_clock):
    leader = Replica(tmp_path, isr=(1, 2))

    async def main():
        leader.produce(2)
        leader.fetch(2, 2)
        leader.partition.isr_change_pending = True
        leader.fetch(3, 1)
        leader.partition.isr_change_pending = False
        leader.manager.shrink_isrs()
        await asyncio.gather(*leader.tasks)

    run(main())
    assert leader.isr == (1, 2) and leader.store.proposals == []
