"""The verify workloads' group consumer processes at full speed while its offset commits are slow.

A group's offset commit is answered once it is replicated (acks=all on
__consumer_offsets), so it takes as long as the slowest in-sync follower: in
the cluster fault loops, while brokers were killed, paused and catching up,
commits took seconds each. The group consumer used to commit synchronously after
each consume call of at most 500 records, so every slow commit held the member
(still heartbeating) from processing: the group fell behind the producers and,
in one run, did not catch up in the time the loop allows. It now commits
asynchronously, one commit at a time, and processes while a commit is under way.

Here every follower is slowed (MOLDAU_FAULT_SLOW_DISK_FILE: each fetch response
is appended after DELAY_MS), and replica.lag.time.max.ms is long enough that
they all stay in sync: every commit waits up to DELAY_MS for its replicas.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Producer

from helpers.cluster import start_cluster  # noqa: F401 (fixture)
from helpers.reliability import WorkloadProcess, journal_lines, wait_for

pytestmark = pytest.mark.timeout(240)

SLOW_DISK_FILE = "slow-disk"
DELAY_MS = 4000
RECORDS = 10_000  # 20 consume calls of 500: a synchronous commit after each one waits 20 x ~DELAY_MS / 2 and more
IN_TIME_S = 40  # the reader has this long to process them all (an idle machine needs a few seconds)


def test_group_consumer_is_not_held_back_by_slow_commits(start_cluster, tmp_path, monkeypatch):
    monkeypatch.setenv("MOLDAU_FAULT_SLOW_DISK_FILE", SLOW_DISK_FILE)  # relative: each broker's own log dir
    cluster = start_cluster(3, replica_lag_time_max_ms=60_000)
    cluster.create_topic("in", partitions=3, replication_factor=1)  # no followers: producing stays fast
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 20})
    for i in range(RECORDS):
        producer.produce("in", b"record-%d" % i, partition=i % 3)
        producer.poll(0)
    assert producer.flush(60) == 0
    for broker in cluster.brokers.values():
        (broker.data_dir / SLOW_DISK_FILE).write_text(str(DELAY_MS))

    journal = tmp_path / "journal"
    header = 2  # the topic and group lines
    with WorkloadProcess("group-consumer", cluster.bootstrap, journal, "reader-0", topic="in",
                         group="readers") as reader:
        wait_for(lambda: journal_lines(journal) > header, 120, "the reader's first record")
        started = time.monotonic()
        try:
            wait_for(lambda: journal_lines(journal) >= header + RECORDS, IN_TIME_S, f"the reader to process {RECORDS}")
        finally:
            print(f"processed {journal_lines(journal) - header} records in {time.monotonic() - started:.1f}s")
        assert reader.stop(60) == 0, reader.stderr_tail()
