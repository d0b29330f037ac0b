"""acks=all (Partition.wait_for_replication, Kafka's DelayedProduce): a write is answered once the high
watermark passes it, at the request timeout by the fake clock, or at once when its leadership ends."""

from __future__ import annotations

import asyncio

import pytest

from broker.cluster.metadata import PartitionState
from broker.errors import ErrorCode

from .conftest import run
from .replication import Replica


@pytest.fixture
def leader(tmp_path, fake_clock):
    return Replica(tmp_path, isr=(1, 2))


def test_an_acks_all_write_completes_when_the_high_watermark_passes_it(leader, fake_clock):
    async def main():
        end = leader.produce(2)
        wait = asyncio.ensure_future(leader.partition.wait_for_replication(end, 1, 30))
        await asyncio.sleep(0)
        leader.fetch(2, 1)
        await asyncio.sleep(0)
        assert not wait.done(), "the high watermark (1) has not passed offset 2"
        leader.fetch(2, 2)
        return await wait

    assert run(main()) == ErrorCode.NONE


def test_an_acks_all_write_times_out_at_the_request_timeout(leader, fake_clock):
    async def main():
        end = leader.produce(1)
        wait = asyncio.ensure_future(leader.partition.wait_for_replication(end, 1, 30))
        await fake_clock.run_for(29.9)
        assert not wait.done()
        await fake_clock.run_for(0.1)
        return await wait

    assert run(main()) == ErrorCode.REQUEST_TIMED_OUT


def test_a_write_already_replicated_is_answered_at_once(leader, fake_clock):
    async def main():
        end = leader.produce(1)
        leader.fetch(2, end)
        return await leader.partition.wait_for_replication(end, 1, 30)

    assert run(main()) == ErrorCode.NONE


def test_a_write_of_an_older_leadership_is_not_leader(leader, fake_clock):
    async def main():
        end = leader.produce(1)
        return await leader.partition.wait_for_replication(end, 0, 30)

    assert run(main()) == ErrorCode.NOT_LEADER_OR_FOLLOWER


def test_losing_leadership_answers_waiting_writes_at_once(leader, fake_clock):
    async def main():
        end = leader.produce(1)
        wait = asyncio.ensure_future(leader.partition.wait_for_replication(end, 1, 30))
        await asyncio.sleep(0)
        leader.partition.apply(PartitionState(2, 2, (2,), (1, 2)))
        return await wait

    assert run(main()) == ErrorCode.NOT_LEADER_OR_FOLLOWER


def test_a_new_epoch_of_the_same_leader_fails_the_older_waits(leader, fake_clock):
    async def main():
        end = leader.produce(1)
        wait = asyncio.ensure_future(leader.partition.wait_for_replication(end, 1, 30))
        await asyncio.sleep(0)
        leader.partition.apply(PartitionState(1, 2, (1, 2), (1, 2)))
        leader.fetch(2, end)
        return await wait

    assert run(main()) == ErrorCode.NOT_LEADER_OR_FOLLOWER, "its log may have been cut and refilled"


def test_an_isr_below_min_insync_replicas_after_the_append_is_reported(tmp_path, fake_clock):
    leader = Replica(tmp_path, isr=(1,), replicas=(1, 2), min_insync=2)

    async def main():
        end = leader.produce(1)
        return await leader.partition.wait_for_replication(end, 1, 30)

    assert run(main()) == ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND


def test_waits_complete_in_offset_order_as_the_high_watermark_moves(leader, fake_clock):
    async def main():
        waits = []
        for _ in range(3):
            end = leader.produce(1)
            waits.append(asyncio.ensure_future(leader.partition.wait_for_high_watermark(end, 1, 30)))
        await asyncio.sleep(0)
        leader.fetch(2, 2)
        await asyncio.sleep(0)
        assert [w.done() for w in waits] == [True, True, False]
        leader.fetch(2, 3)
        return await asyncio.gather(*waits)

    assert run(main()) == [True, True, True]


def test_a_timed_out_wait_leaves_the_others_intact(leader, fake_clock):
    async def main():
        first = leader.produce(1)
        short = asyncio.ensure_future(leader.partition.wait_for_high_watermark(first, 1, 1))
        second = leader.produce(1)
        long = asyncio.ensure_future(leader.partition.wait_for_high_watermark(second, 1, 30))
        await fake_clock.run_for(1)
        assert short.done() and not short.result() and not long.done()
        leader.fetch(2, second)
        return await long

    assert run(main()) is True
    assert fake_clock.pending() == 0
