"""A three-broker cluster under network partitions and a slow follower disk: nothing acknowledged is lost.

helpers.cluster_faults' loop (RF=3, min.insync.replicas=2, no unclean
election, `verify.workloads` clients (all kinds),
`moldau verify` and byte-identical
replicas at the end) on a cluster whose replication and etcd connections go
through fault proxies (helpers.cluster ``proxied``; clients connect directly).
Each partition either drops connections or blackholes them, chosen per cycle:

- ``brokers``: one broker cut from the other two, not from clients or etcd.
  It keeps its session, so it keeps its leaderships: their followers fall out
  of the ISR, which shrinks to the cut-off leader alone, and min.insync.replicas
  makes it refuse acks=all writes (Kafka's ZooKeeper-era behaviour); the
  partitions the others lead shrink their ISRs and go on. After healing it
  catches up and every ISR is full again.
- ``etcd``: one broker cut from etcd, not from the others. Its session
  expires and the controller moves its leaderships (checked, from another
  broker's metadata); it cannot know, but its followers now fetch from the new
  leaders, so its high watermark stands still and it acknowledges nothing
  more. After healing it registers again and follows.

``slow disk``: one follower's appends wait 8 s each (broker/faults.py's
MOLDAU_FAULT_SLOW_DISK_FILE, a file in its log dir, written and removed by the
test) until the leaders drop it from their ISRs; then the delay is lifted and
it must catch up and rejoin, without a restart.

MOLDAU_CHAOS_CYCLES sets the cycles of each kind (2 in `make test`, 20 in
`make chaos`); MOLDAU_CHAOS_SEED replays a run's choices.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka.admin import AdminClient

from helpers.cluster import start_cluster  # noqa: F401 (fixture)
from helpers.cluster_faults import PARTITIONS, PROBE_TOPIC, TOPIC, FaultLoop
from helpers.fault_proxy import BLACKHOLE, DROP
from helpers.reliability import budget, record_result

CYCLES = budget(2, 20, "MOLDAU_CHAOS_CYCLES")  # of each fault kind
SESSION_TIMEOUT_MS = 3000
SLOW_DISK_FILE = "slow-disk"
CLUSTER = {"etcd_session_timeout_ms": SESSION_TIMEOUT_MS, "min_insync_replicas": 2,
           "unclean_leader_election_enable": "false"}


def leaders_seen_by(bootstrap: str) -> list[int]:
    """TOPIC's partition leaders in one broker's metadata."""
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(TOPIC, timeout=10)
    return [md.topics[TOPIC].partitions[p].leader for p in range(PARTITIONS)]


def isr_cut(cluster, node: int) -> bool:
    """Whether a partition led by another broker dropped ``node`` from its ISR and one ``node`` leads has it alone
    (or ``node`` leads none)."""
    parts = [cluster.partition(topic, p) for topic in (TOPIC, PROBE_TOPIC) for p in range(PARTITIONS)]
    theirs = [p for p in parts if p.leader != node]
    ours = [p for p in parts if p.leader == node]
    return any(node not in p.isrs for p in theirs) and all(list(p.isrs) == [node] for p in ours)


def partition(loop: FaultLoop, kind: str) -> dict:
    role, node = loop.pick_target()
    mode = loop.rng.choice([DROP, BLACKHOLE])
    cluster = loop.cluster
    try:
        if kind == "brokers":
            cluster.cut_from_brokers(node, mode)
            # replication goes through the proxies: the ISRs shrink on both sides of the cut
            cluster.wait_until(lambda: isr_cut(cluster, node), 30, f"ISRs without broker {node} or with it alone")
        else:
            cluster.cut_from_etcd(node, mode)
            other = next(b for n, b in cluster.brokers.items() if n != node)
            cluster.wait_until(lambda: node not in leaders_seen_by(other.bootstrap), 30,
                               f"the leaderships of broker {node}, cut from etcd, to move")
        time.sleep(loop.rng.uniform(0.0, 3.0))
    finally:
        cluster.heal()
    return {"role": f"{role} ({mode})", "node": node}


@pytest.mark.timeout(budget(240, 3600))
def test_acknowledged_records_survive_partitions(start_cluster, tmp_path):
    cluster = start_cluster(3, proxied=True, **CLUSTER)
    with FaultLoop(cluster, tmp_path, f"partitions: {CYCLES} cycles of each kind") as loop:
        loop.run(["brokers", "etcd"] * CYCLES, partition)
        verdict = loop.finish()
    record_result("cluster_partitions", **loop.figures(verdict))


def slow_follower(loop: FaultLoop, kind: str) -> dict:
    cluster = loop.cluster
    part = cluster.partition(TOPIC, loop.rng.randrange(PARTITIONS))
    node = loop.rng.choice([r for r in part.replicas if r != part.leader])
    slow = cluster.brokers[node].data_dir / SLOW_DISK_FILE
    slow.write_text("8000")
    try:
        cluster.wait_until(lambda: node not in cluster.partition(TOPIC, part.id).isrs, 60,
                           f"slow follower {node} out of the ISR of {TOPIC}-{part.id}")
    finally:
        slow.unlink()
    return {"role": "follower", "node": node}


@pytest.mark.timeout(budget(180, 3600))
def test_slow_follower_leaves_and_rejoins_the_isr(start_cluster, tmp_path, monkeypatch):
    monkeypatch.setenv("MOLDAU_FAULT_SLOW_DISK_FILE", SLOW_DISK_FILE)  # relative: each broker's own log dir
    cluster = start_cluster(3, **CLUSTER)
    with FaultLoop(cluster, tmp_path, f"slow follower disk: {CYCLES} cycles") as loop:
        loop.run(["slow disk"] * CYCLES, slow_follower)
        verdict = loop.finish()
    for node, b in cluster.brokers.items():
        assert b.log_text().count("follower appends at full speed again") == sum(
            f["node"] == node for f in loop.faults), b.log_tail()
    record_result("cluster_slow_follower", **loop.figures(verdict))
