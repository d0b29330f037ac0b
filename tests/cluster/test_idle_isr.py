"""An idle partition's ISR while every replica fetches (issue 27): after a create of hundreds of partitions
(applied in steps, so followers fetch from leaders still applying theirs), no leader drops a follower that
fetches, however long nothing is written; and a follower that comes back rejoins every ISR without a write.
replica.lag.time.max.ms is short here, so a follower whose fetches a leader does not record leaves within
seconds."""

from __future__ import annotations

import re
import time

import pytest

from helpers.cluster import start_cluster  # noqa: F401 (fixture)

pytestmark = pytest.mark.timeout(240)

PARTITIONS = 300  # many steps of 16 on every broker
LAG_MS = 3000
SHRINK = re.compile(r"(\S+)-(\d+): ISR \[([\d, ]*)\] -> \[([\d, ]*)\]")


def shrinks(text: str) -> list[str]:
    """The leaders' ISR changes that took a member out, as logged."""
    return [m.group(0) for m in SHRINK.finditer(text)
            if set(m.group(3).split(", ")) - set(m.group(4).split(", "))]


def short_isrs(cluster, topic: str) -> list[tuple[int, list[int]]]:
    partitions = cluster.metadata(topic).topics[topic].partitions
    assert len(partitions) == PARTITIONS
    return [(p, md.isrs) for p, md in sorted(partitions.items()) if len(md.isrs) != 3]


def test_an_idle_partitions_isr_never_shrinks_and_refills_while_every_replica_fetches(start_cluster):
    cluster = start_cluster(3, replica_lag_time_max_ms=LAG_MS)
    cluster.create_topic("idle", partitions=PARTITIONS, replication_factor=3)
    deadline = time.monotonic() + 4 * LAG_MS / 1000  # a follower not recorded would be out after LAG_MS
    while time.monotonic() < deadline:
        assert short_isrs(cluster, "idle") == []
        time.sleep(1)
    for node, broker in cluster.brokers.items():
        assert shrinks(broker.log_text()) == [], f"broker {node} dropped a fetching follower"

    follower = 3
    cluster.brokers[follower].kill()
    cluster.wait_until(lambda: all(follower not in isrs for _, isrs in short_isrs(cluster, "idle")), 60,
                       f"broker {follower} out of every ISR")
    cluster.brokers[follower].start()
    cluster.wait_until(lambda: short_isrs(cluster, "idle") == [], 90, "every ISR full again, nothing written")
    time.sleep(2 * LAG_MS / 1000)
    assert short_isrs(cluster, "idle") == []
