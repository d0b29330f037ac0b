"""A three-broker cluster on a three-member etcd that loses members: the brokers go on serving.

helpers.cluster_faults' loop (RF=3, min.insync.replicas=2, no unclean
election, every kind of `verify.workloads` client, `moldau verify` and
byte-identical replicas at the end) with the brokers' etcd.connect naming all three members:

- ``member``: kill -9 of one etcd member (in turn, the first one first: every
  broker's client starts on it), restarted after longer than a session. The
  other two keep a quorum and the brokers' etcd client moves to them: the
  probe producer is acknowledged on every partition meanwhile, and no broker
  loses its session (each registration keeps its lease; every partition keeps
  its leader).
- ``etcd``: kill -9 of all three members for longer than
  etcd.session.timeout.ms, then a restart. The brokers keep serving what they
  lead with acks=all (the ISRs are intact: the probe is acknowledged on every
  partition during the outage), nothing can change leaders or ISRs while etcd
  is gone, and once it is back the sessions go on (etcd renews leases when it
  elects a leader): each registration keeps its lease, every partition still
  has the leader it had before.

MOLDAU_CHAOS_CYCLES sets the cycles of each kind (2 in `make test`, 20 in
`make chaos`); MOLDAU_CHAOS_SEED replays a run's choices.
"""

from __future__ import annotations

import time

import pytest

from helpers.cluster import start_cluster  # noqa: F401 (fixture)
from helpers.cluster_faults import PARTITIONS, TOPIC, FaultLoop
from helpers.reliability import budget, record_result

CYCLES = budget(2, 20, "MOLDAU_CHAOS_CYCLES")  # of each fault kind
SESSION_TIMEOUT_MS = 4000


def leaders(cluster) -> list[int]:
    return [cluster.leader(TOPIC, p) for p in range(PARTITIONS)]


def etcd_outage(loop: FaultLoop, kind: str) -> dict:
    cluster, etcd = loop.cluster, loop.cluster.etcd
    before = leaders(cluster), cluster.registrations()
    # longer than a session: a broker that only knew the lost member would lose its session
    outage = loop.rng.uniform(SESSION_TIMEOUT_MS / 1000 + 1, SESSION_TIMEOUT_MS / 1000 + 4)
    if kind == "member":
        # in turn, from the first: the one every broker's client starts on
        index = sum(f["kind"] == "member" for f in loop.faults) % len(etcd.members)
        victims = [etcd.members[index]]
    else:
        victims = etcd.members
    for member in victims:
        member.kill()
    down = time.monotonic()
    time.sleep(outage)
    served = loop.probe.acked_on_every_partition(down + 1.0, time.monotonic())
    for member in victims:
        etcd.restart(member)
    assert served, f"no acks=all acknowledgement on some partition while {len(victims)} etcd member(s) were down"
    loop.wait_healthy()
    assert cluster.registrations() == before[1], f"a broker lost its etcd session in an etcd {kind} outage"
    assert leaders(cluster) == before[0], f"leaders moved ({before[0]} -> {leaders(cluster)}) in an etcd {kind} outage"
    return {"role": f"member {index}" if kind == "member" else "all members", "node": "etcd"}


@pytest.mark.timeout(budget(240, 3600))
def test_brokers_ride_out_etcd_failures(start_cluster, tmp_path):
    cluster = start_cluster(3, etcd_members=3, etcd_session_timeout_ms=SESSION_TIMEOUT_MS, min_insync_replicas=2,
                            unclean_leader_election_enable="false")
    with FaultLoop(cluster, tmp_path, f"etcd failures: {CYCLES} cycles of each kind") as loop:
        loop.run(["member", "etcd"] * CYCLES, etcd_outage)
        verdict = loop.finish()
    record_result("cluster_etcd_faults", **loop.figures(verdict))
