"""A three-broker cluster under crashes and pauses: nothing acknowledged with acks=all is lost, no replica diverges.

An etcd and three brokers (helpers.cluster) in helpers.cluster_faults' loop: a
topic with RF=3, min.insync.replicas=2 and unclean.leader.election.enable=false,
and `verify.workloads` clients (idempotent and transactional acks=all
producers, a consumer group, the exactly-once copy app) throughout.
Each cycle injects one fault of the kinds in MOLDAU_CHAOS_FAULTS (default
``kill,pause``), seeded, in turns:

- ``kill``: kill -9 of a broker chosen by role (a partition leader, a
  follower, or the controller) and its restart;
- ``pause``: SIGSTOP of a broker for longer than ``etcd.session.timeout.ms``,
  so its session expires and its leaderships move, then SIGCONT: the deposed
  leader wakes up and must not acknowledge a write it cannot replicate.

Between faults the cluster gets back to a full ISR. Afterwards `moldau verify`
must find every acknowledged record exactly once and in order, and every
partition's three replicas must hold byte-identical logs; a probe producer
gives each fault's unavailability window.

The same kill loop with unclean.leader.election.enable=true (and a cycle that
leaves only an out-of-sync replica alive, the case unclean election exists
for) reports what it lost in the results summary; losing is not a failure.

MOLDAU_CHAOS_CYCLES sets the cycles of each kind (3 in `make test`, 20 in
`make chaos`); MOLDAU_CHAOS_SEED replays a run's choices (the fault roles and
timings; which node holds a role is the cluster's own choice).

On main at 766d0d7 ``pause`` found a lost acknowledgement in about one run
in four (a record acknowledged with acks=all at an offset where all three
replicas later held another record; the producer then died with
OUT_OF_ORDER_SEQUENCE_NUMBER); none in twelve runs after 1d6b734 changed
follower truncation; it came back later (2 runs in 8 with 8 cycles of each
kind). The cause: a leader woken from a pause appended a produce request
queued during it, learned it was deposed before the request's acks=all waiter
was registered, and answered it as acknowledged when it led again at a later
epoch -- over offsets that its truncation had emptied and the new leaders had
refilled. Waiters now carry the leader epoch of their append. A failure here
is worth keeping (--basetemp) and reading.
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from helpers.cluster import start_cluster  # noqa: F401 (fixture)
from helpers.cluster_faults import IDEMPOTENT, PARTITIONS, TOPIC, FaultLoop
from helpers.reliability import budget, record_result

CYCLES = budget(3, 20, "MOLDAU_CHAOS_CYCLES")  # of each fault kind
FAULTS = os.environ.get("MOLDAU_CHAOS_FAULTS", "kill,pause").split(",")
UNCLEAN_CYCLES = budget(2, 20, "MOLDAU_CHAOS_CYCLES")
SESSION_TIMEOUT_MS = 3000


def crash_or_pause(loop: FaultLoop, kind: str) -> dict:
    role, node = loop.pick_target()
    broker = loop.cluster.brokers[node]
    if kind == "kill":
        broker.kill()
        time.sleep(loop.rng.uniform(0.0, 2.0))
        broker.restart()
    else:
        os.kill(broker.pid, signal.SIGSTOP)
        try:
            time.sleep(SESSION_TIMEOUT_MS / 1000 + loop.rng.uniform(1.0, 3.0))
        finally:
            os.kill(broker.pid, signal.SIGCONT)
    return {"role": role, "node": node}


@pytest.mark.timeout(budget(240, 3600))
def test_acknowledged_records_survive_cluster_faults(start_cluster, tmp_path):
    assert set(FAULTS) <= {"kill", "pause"}, f"MOLDAU_CHAOS_FAULTS names unknown faults: {FAULTS}"
    cluster = start_cluster(3, etcd_session_timeout_ms=SESSION_TIMEOUT_MS, min_insync_replicas=2,
                            unclean_leader_election_enable="false")
    kinds = FAULTS * CYCLES
    with FaultLoop(cluster, tmp_path, f"cluster faults: {CYCLES} cycles of each of {FAULTS}") as loop:
        loop.run(kinds, crash_or_pause)
        verdict = loop.finish()
    assert [rc for b in cluster.brokers.values() for rc in b.returncodes].count(-9) == kinds.count("kill")
    record_result("cluster_faults", **loop.figures(verdict))


def lone_stale_replica(loop: FaultLoop, kind: str) -> dict:
    """kill -9 of a follower; while the others go on without it, kill -9 of them both: the stale one comes back
    alone and is elected uncleanly; then the others return and truncate to its log."""
    _, stale = loop.pick_target("follower")
    brokers = loop.cluster.brokers
    brokers[stale].kill()
    loop.cluster.wait_until(lambda: stale not in loop.cluster.partition(TOPIC, 0).isrs, 30, f"{stale} out of the ISR")
    time.sleep(loop.rng.uniform(1.0, 3.0))  # acknowledgements it will not have
    others = [n for n in brokers if n != stale]
    for n in others:
        brokers[n].kill()
    brokers[stale].restart()
    loop.cluster.wait_until(lambda: all(loop.cluster.leader(TOPIC, p) == stale for p in range(PARTITIONS)), 60,
                            f"unclean election of {stale}")
    time.sleep(loop.rng.uniform(1.0, 3.0))
    for n in others:
        brokers[n].restart()
    return {"role": "stale follower", "node": stale}


@pytest.mark.timeout(budget(180, 3600))
def test_unclean_election_loss_is_reported(start_cluster, tmp_path):
    """Not a pass/fail on loss: the figures say what unclean election cost (the replicas must still agree)."""
    cluster = start_cluster(3, etcd_session_timeout_ms=SESSION_TIMEOUT_MS, min_insync_replicas=2)
    with FaultLoop(cluster, tmp_path, f"unclean election: {UNCLEAN_CYCLES} cycles", unclean=True,
                   plan=IDEMPOTENT) as loop:
        loop.run(["unclean"] * UNCLEAN_CYCLES, lone_stale_replica)
        verdict = loop.finish(must_pass=False)
    print(f"unclean elections cost: {verdict['violations_by_kind']}")
    record_result("cluster_unclean_election", **loop.figures(verdict), violations_by_kind=verdict["violations_by_kind"])
