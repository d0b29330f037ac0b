"""__consumer_offsets is compacted: after many offset commits a restart replays only the live keys.

A group commits offsets for PARTITIONS partitions over and over (confluent-kafka,
asynchronous commits). The log cleaner compacts __consumer_offsets; the restart
replays a number of records bounded by the live keys plus the uncleaned tail,
not by the commits ever made, and the group's offsets are the last ones
committed. make test commits 20,000 offsets; make chaos (MOLDAU_CHAOS=1) two
million.
"""

from __future__ import annotations

import re
import time

import pytest
from confluent_kafka import TopicPartition

from helpers.kafka import consumer, create_topic
from helpers.reliability import budget

PARTITIONS = 100
# offsets.topic.segment.bytes: the tail a restart still replays uncleaned
SEGMENT_BYTES = int(budget(50_000, 1_000_000))


def _records_loaded(broker, since: int) -> int:
    """The records the start after log offset ``since`` replayed (once it has: the broker listens first)."""
    line = broker.wait_for_log(r"loaded \d+ groups from __consumer_offsets-0 \(\d+ records\)", timeout=60, since=since)
    return int(re.search(r"\((\d+) records\)", line)[1])


@pytest.mark.timeout(budget(180, 1800))
def test_restart_replays_only_live_offsets(start_broker):
    commits = int(budget(200, 20_000, "MOLDAU_CHAOS_OFFSET_COMMITS"))  # each of PARTITIONS offsets
    broker = start_broker({"offsets.topic.num.partitions": 1, "offsets.topic.segment.bytes": SEGMENT_BYTES,
                           "log.cleaner.backoff.ms": 200})
    create_topic(broker.bootstrap, "tracked", PARTITIONS)
    c, errors = consumer(broker.bootstrap, group_id="many-commits")
    try:
        for n in range(1, commits + 1):
            offsets = [TopicPartition("tracked", p, n * 10 + p) for p in range(PARTITIONS)]
            while True:
                try:
                    c.commit(offsets=offsets, asynchronous=n % 50 != 0)  # every 50th waits: bounded in flight
                    break
                except BufferError:
                    c.poll(0.05)
    finally:
        c.close()
    assert not errors, errors[:5]
    total = commits * PARTITIONS

    deadline = time.monotonic() + budget(120, 900)
    while "cleaned __consumer_offsets-0 below offset" not in broker.log_since_start():
        assert time.monotonic() < deadline, broker.log_tail()
        time.sleep(0.5)
    # the cleaner may still be catching up with the last commits; wait for it to settle
    time.sleep(2)
    started, since = time.monotonic(), broker.log_offset()
    broker.restart()
    loaded = _records_loaded(broker, since)
    restart_s = time.monotonic() - started
    # live keys plus what is not cleaned yet: the active segment and the dirty part the ratio allows
    per_record = 60  # an offset commit record is at least this many bytes
    assert loaded < PARTITIONS + 4 * SEGMENT_BYTES // per_record, (loaded, total)
    assert loaded < total / 4, (loaded, total)

    c, _ = consumer(broker.bootstrap, group_id="many-commits")
    try:
        committed = c.committed([TopicPartition("tracked", p) for p in range(PARTITIONS)], timeout=30)
    finally:
        c.close()
    assert [tp.offset for tp in committed] == [commits * 10 + p for p in range(PARTITIONS)]
    print(f"{total} offsets committed; restart replayed {loaded} records in {restart_s:.1f}s")
