"""On an idle cluster an acks=all write is answered within a few replica fetch round trips, not a fetch wait.

An idle follower's fetch is parked at the leader for up to replica.fetch.wait.max.ms. The leader's
append -- a client's produce, the group coordinator's offset commit record, the transaction
coordinator's state record, a transaction marker -- must wake it, as Kafka's does: the follower then copies the record, its next fetch moves the high watermark, and the
write is answered. An append path that forgot the wake-up would answer each write only when the
parked fetch timed out: under produce load it hides (the followers' fetches never park), so here
nothing else runs and the fetch wait is long enough to tell apart from a loaded machine's delays.

The brokers' stage timestamps (broker/cluster/stages.py) show the wake-up itself: on every partition written, each
follower's fetch reads an append within a fraction of a second of it.
"""

from __future__ import annotations

import re
import statistics
import time
from collections import defaultdict

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from helpers.cluster import start_cluster  # noqa: F401 (fixture)

pytestmark = pytest.mark.timeout(120)

FETCH_WAIT_MS = 5000  # replica.fetch.wait.max.ms: a missed wake-up costs up to this per write
WRITES = 12
PAUSE_S = 0.2  # between writes: the followers' next fetches are parked again by then
WAKE_S = 0.25  # from a leader's append to each follower's fetch reading it (a parked fetch: at once)
_STAGE = re.compile(r"moldau\.stages: (appended|sent) (\S+)-(\d+) (\d+) (\d+\.\d+)(?: replica (\d+))?")


def timed(what: str, write) -> tuple[float, float]:
    """Time WRITES calls of ``write(i)``, after a first untimed one (metadata, the coordinator), and check
    they took well under the fetch wait: a write that waited for the followers' parked fetches to time
    out takes about FETCH_WAIT_MS - PAUSE_S. Returns when the timed writes began and ended
    (CLOCK_MONOTONIC)."""
    write(0)
    began = time.monotonic()
    took = []
    for i in range(1, WRITES + 1):
        time.sleep(PAUSE_S)
        started = time.monotonic()
        write(i)
        took.append(time.monotonic() - started)
    report = f"{what}: {', '.join(f'{s * 1000:.0f}' for s in took)} ms"
    print(report)
    assert statistics.median(took) < FETCH_WAIT_MS / 5000, report
    assert sum(s >= FETCH_WAIT_MS / 2000 for s in took) <= 2, report
    return began, time.monotonic()


def test_idle_offset_commits_and_acks_all_writes_wake_the_followers(start_cluster):
    cluster = start_cluster(3, min_insync_replicas=2, replica_fetch_wait_max_ms=FETCH_WAIT_MS,
                            log_level="INFO,moldau.stages=DEBUG")
    cluster.create_topic("idle", partitions=1, replication_factor=3)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 0})

    def produce(i: int) -> None:
        producer.produce("idle", b"%d" % i)
        assert producer.flush(30) == 0

    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "idle-committer",
                         "enable.auto.commit": False})

    def commit(i: int) -> None:
        (committed,) = consumer.commit(offsets=[TopicPartition("idle", 0, i + 1)], asynchronous=False)
        assert committed.error is None

    transactional = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": "idle-txn",
                              "linger.ms": 0})
    transactional.init_transactions(30)

    def transaction(i: int) -> None:  # AddPartitionsToTxn, EndTxn: state records; then the markers
        transactional.begin_transaction()
        transactional.produce("idle", b"txn-%d" % i)
        transactional.commit_transaction(30)

    try:
        windows = [timed("acks=all produce", produce), timed("offset commit", commit),
                   timed("transaction", transaction)]
    finally:
        consumer.close()
    assert all(cluster.full_isr(topic, partitions, 3)  # nobody left the ISR meanwhile
               for topic, partitions in (("idle", 1), ("__consumer_offsets", 3), ("__transaction_state", 3)))

    woken = followers_woken(cluster, windows)
    assert set(woken) >= {"idle", "__consumer_offsets", "__transaction_state"}, woken
    print({t: f"{max(w) * 1000:.1f} ms max of {len(w)}" for t, w in woken.items()})
    late = {topic: [f"{s * 1000:.0f} ms" for s in waits if s >= WAKE_S] for topic, waits in woken.items()}
    assert not any(late.values()), f"appends a follower's fetch read late: {late}"


def followers_woken(cluster, windows: list[tuple[float, float]]) -> dict[str, list[float]]:
    """For each topic written in the ``windows`` (CLOCK_MONOTONIC, which the brokers' stage lines use; not
    the first writes, which create the internal topics while their followers have yet to fetch them):
    seconds from each append on a partition's leader to each follower's fetch reading it."""
    waits: dict[str, list[float]] = defaultdict(list)
    for node, broker in cluster.brokers.items():
        appended, sent = defaultdict(list), defaultdict(list)
        for m in _STAGE.finditer(broker.log_text()):
            key, offset, at = (m[2], int(m[3])), int(m[4]), float(m[5])
            if m[1] == "appended":
                appended[key].append((offset, at))
            else:
                sent[(key, int(m[6]))].append((offset, at))
        for (topic, index), appends in appended.items():
            if cluster.leader(topic, index) != node:
                continue  # (a follower's own appends)
            for follower in (n for n in cluster.brokers if n != node):
                reads = sent[((topic, index), follower)]
                for offset, at in appends:
                    if any(began <= at <= ended for began, ended in windows):  # the first fetch reading it
                        waits[topic].append(min((t for o, t in reads if o >= offset and t >= at),
                                                default=float("inf")) - at)
    return waits
