"""The fetch purgatory (broker/fetch/delayed_fetch.py): a parked fetch is answered by an append past its offset,
by min_bytes of appends, or at max_wait_ms by the fake clock, and never before."""

from __future__ import annotations

import asyncio

import pytest

from broker.fetch.delayed_fetch import DelayedFetch, FetchPurgatory
from broker.fetch.log_read import READ_COMMITTED, FetchPartition, TopicPartition
from protocol.records import build_batch

from .conftest import append, run

NOW = 1_700_000_000_000
READ_UNCOMMITTED = 0


@pytest.fixture
def logs(logs):
    logs.create_topic("t", 2)
    logs.create_topic("other", 1)
    return logs


def produce(logs, topic="t", partition=0, value=b"v", transactional=False) -> None:
    log_ = logs.log(topic, partition)
    batch = build_batch([(b"k", value)], timestamp_ms=NOW, **(
        {"producer_id": 5, "producer_epoch": 0, "base_sequence": log_.log_end_offset, "transactional": True}
        if transactional else {}))
    append(log_, batch, now_ms=NOW)


def park(logs, purgatory, *, offset=0, partitions=(0,), min_bytes=1, max_wait_s=0.5, isolation=READ_UNCOMMITTED,
         max_bytes=1 << 20):
    wanted = {TopicPartition("t", p): FetchPartition(offset, max_bytes) for p in partitions}
    delayed = DelayedFetch(logs, wanted, {"t"}, isolation, min_bytes, 0)
    return delayed, purgatory.watch(delayed, max_wait_s)


def appended(purgatory, logs, topic="t", partition=0, **kw) -> None:
    produce(logs, topic, partition, **kw)
    purgatory.check_and_complete(logs.log(topic, partition))


def test_an_append_past_the_fetch_offset_answers_a_parked_fetch(logs, fake_clock):
    async def main():
        purgatory = FetchPurgatory()
        _, answered = park(logs, purgatory)
        assert not answered.done()
        appended(purgatory, logs)
        assert answered.done()
        assert purgatory._watchers == {}, "an answered fetch is no longer watched"

    run(main())


def test_an_append_to_another_partition_or_topic_answers_nothing(logs, fake_clock):
    async def main():
        purgatory = FetchPurgatory()
        _, answered = park(logs, purgatory)
        appended(purgatory, logs, partition=1)
        appended(purgatory, logs, topic="other")
        assert not answered.done()

    run(main())


def test_max_wait_answers_a_fetch_nothing_arrived_for_by_the_clock(logs, fake_clock):
    async def main():
        purgatory = FetchPurgatory()
        _, answered = park(logs, purgatory, max_wait_s=0.5)
        fake_clock.advance(0.499)
        assert not answered.done()
        fake_clock.advance(0.001)
        assert answered.done()
        await asyncio.sleep(0)
        assert purgatory._watchers == {} and fake_clock.pending() == 0

    run(main())


def test_an_answered_fetch_leaves_no_timer(logs, fake_clock):
    async def main():
        purgatory = FetchPurgatory()
        park(logs, purgatory, max_wait_s=30)
        assert fake_clock.pending() == 1
        appended(purgatory, logs)
        await asyncio.sleep(0)
        assert fake_clock.pending() == 0

    run(main())


def test_min_bytes_waits_for_enough_appended_bytes(logs, fake_clock):
    one = len(build_batch([(b"k", b"v" * 100)], timestamp_ms=NOW))

    async def main():
        purgatory = FetchPurgatory()
        delayed, answered = park(logs, purgatory, min_bytes=2 * one + 1)
        appended(purgatory, logs, value=b"v" * 100)
        appended(purgatory, logs, value=b"v" * 100)
        assert not answered.done() and delayed.accumulated == 2 * one
        appended(purgatory, logs, value=b"v" * 100)
        assert answered.done()

    run(main())


def test_min_bytes_counts_the_bytes_of_every_watched_partition(logs, fake_clock):
    one = len(build_batch([(b"k", b"v")], timestamp_ms=NOW))

    async def main():
        purgatory = FetchPurgatory()
        _, answered = park(logs, purgatory, partitions=(0, 1), min_bytes=2 * one)
        appended(purgatory, logs, partition=0)
        assert not answered.done()
        appended(purgatory, logs, partition=1)
        assert answered.done()

    run(main())


def test_min_bytes_counts_no_more_than_the_partitions_max_bytes(logs, fake_clock):
    async def main():
        purgatory = FetchPurgatory()
        delayed, answered = park(logs, purgatory, min_bytes=1000, max_bytes=10)
        appended(purgatory, logs, value=b"x" * 500)
        assert delayed.accumulated == 10 and not answered.done()

    run(main())


def test_a_fetch_beyond_the_end_waits_for_an_append_past_its_offset(logs, fake_clock):
    async def main():
        purgatory = FetchPurgatory()
        produce(logs)
        _, answered = park(logs, purgatory, offset=2)
        appended(purgatory, logs)
        assert not answered.done(), "the end (2) has not moved past the fetch offset"
        appended(purgatory, logs)
        assert answered.done()

    run(main())


def test_read_committed_is_not_answered_by_records_of_an_open_transaction(logs, fake_clock):
    async def main():
        purgatory = FetchPurgatory()
        _, answered = park(logs, purgatory, isolation=READ_COMMITTED)
        appended(purgatory, logs, transactional=True)
        assert not answered.done()
        fake_clock.advance(0.5)
        assert answered.done()

    run(main())


def test_a_cancelled_wait_stops_being_watched(logs, fake_clock):
    async def main():
        purgatory = FetchPurgatory()
        _, answered = park(logs, purgatory, max_wait_s=30)
        answered.cancel()
        await asyncio.sleep(0)
        assert purgatory._watchers == {} and fake_clock.pending() == 0

    run(main())


def test_the_high_watermark_moving_answers_a_consumers_fetch(tmp_path, fake_clock):
    from .replication import Replica

    async def main():
        leader = Replica(tmp_path, isr=(1, 2))
        wanted = {TopicPartition("t", 0): FetchPartition(0, 1 << 20)}
        logs = type("Logs", (), {"topic": lambda self, name: type("T", (), {"name": name})(),
                                 "log": lambda self, t, i: leader.log})()
        answered = leader.broker.fetch_purgatory.watch(DelayedFetch(logs, wanted, {"t"}, 0, 1, 0), 30)
        leader.produce(1)
        assert not answered.done(), "appended, not yet replicated"
        leader.fetch(2, 1)
        assert answered.done()

    run(main())
