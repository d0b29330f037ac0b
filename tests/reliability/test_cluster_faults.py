"""A three-broker cluster under faults: nothing acknowledged with acks=all is lost, no replica diverges.

An etcd and three brokers (helpers.cluster), a topic with RF=3,
min.insync.replicas=2 and unclean.leader.election.enable=false, and two
idempotent `verify.workloads` producers (acks=all) running throughout. Each
cycle injects one fault of the kinds in MOLDAU_CHAOS_FAULTS (default
``kill,pause``), seeded, in turns:

- ``kill``: kill -9 of a broker chosen by role (a partition leader, a
  follower, or the controller) and its restart;
- ``pause``: SIGSTOP of a broker for longer than ``etcd.session.timeout.ms``,
  so its session expires and its leaderships move, then SIGCONT: the deposed
  leader wakes up and must not acknowledge a write it cannot replicate.

Between faults the cluster gets back to a full ISR, so min.insync.replicas
can always be met by the survivors. Afterwards `moldau verify` must find every
acknowledged record exactly once and in order, and every partition's three
replicas must hold byte-identical logs (once caught up, the whole log is below
the high watermark). A probe producer (acks=all, one record per partition
every 100 ms to its own topic) measures the unavailability window of each
fault: the longest gap between two of its acknowledgements on a partition
while that fault was in play.

MOLDAU_CHAOS_CYCLES sets the cycles of each kind (3 in `make test`, 20 in
`make chaos`); MOLDAU_CHAOS_SEED replays a run's choices (the fault roles and
timings; which node holds a role is the cluster's own choice).

On main at 766d0d7 ``pause`` found a lost acknowledgement in about one run
in four (a record acknowledged with acks=all at an offset where all three
replicas later held another record; the producer then died with
OUT_OF_ORDER_SEQUENCE_NUMBER); none in twelve runs after 1d6b734 changed
follower truncation. The cause was not pinned down: a failure here is worth
keeping (--basetemp) and reading.
"""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest
from confluent_kafka import Producer

from helpers.cluster import start_cluster  # noqa: F401 (fixture)
from helpers.reliability import (WorkloadProcess, assert_verified, budget, journal_lines, record_result,
                                 seeded_random, wait_for)

CYCLES = budget(3, 20, "MOLDAU_CHAOS_CYCLES")  # of each fault kind
FAULTS = os.environ.get("MOLDAU_CHAOS_FAULTS", "kill,pause").split(",")
SESSION_TIMEOUT_MS = 3000
TOPIC, PROBE_TOPIC, PARTITIONS = "chaos", "chaos-probe", 3
TOPIC_CONFIG = {"min_insync_replicas": 2, "unclean_leader_election_enable": "false"}
PRODUCERS = [("idem-0", 300), ("idem-1", 300)]  # name, records a second


class Probe:
    """acks=all records to every partition of PROBE_TOPIC every 100 ms; keeps when each was acknowledged."""

    def __init__(self, bootstrap: str) -> None:
        self.acked: dict[int, list[float]] = {p: [] for p in range(PARTITIONS)}
        self._producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                                   "linger.ms": 0, "message.timeout.ms": 300_000,
                                   "reconnect.backoff.max.ms": 500})
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _delivered(self, err, msg) -> None:
        if err is None:
            self.acked[msg.partition()].append(time.monotonic())

    def _run(self) -> None:
        while not self._stop.is_set():
            for p in range(PARTITIONS):
                self._producer.produce(PROBE_TOPIC, b"probe", partition=p, on_delivery=self._delivered)
            self._producer.poll(0.1)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self._producer.flush(60)

    def worst_gap(self, start: float, end: float) -> float:
        """The longest time between two acknowledgements on one partition, of the gaps that ended in (start, end]."""
        worst = 0.0
        for times in self.acked.values():
            times = sorted(times)
            for before, after in zip(times, times[1:]):
                if start < after <= end:
                    worst = max(worst, after - before)
        return worst


def pick_target(cluster, rng, role: str) -> int:
    """The node of a broker playing ``role`` now: the leader or a follower of a random partition, or the controller."""
    if role == "controller":
        return cluster.metadata().controller_id
    part = cluster.partition(TOPIC, rng.randrange(PARTITIONS))
    if role == "leader":
        return part.leader
    return rng.choice([r for r in part.replicas if r != part.leader])


def wait_healthy(cluster, timeout: float = 90) -> None:
    """Every broker registered and every partition of both topics led with all three replicas in sync."""
    cluster.wait_for_brokers(3, timeout)
    for topic in (TOPIC, PROBE_TOPIC):
        cluster.wait_until(lambda: cluster.full_isr(topic, PARTITIONS, 3), timeout, f"{topic} fully replicated")


def divergent_partitions(cluster) -> list[str]:
    """Partitions whose replicas' logs differ, with the first differing byte position."""
    out = []
    for topic in (TOPIC, PROBE_TOPIC):
        for p in range(PARTITIONS):
            logs = {node: cluster.log_bytes(node, topic, p) for node in cluster.brokers}
            if len(set(logs.values())) > 1:
                first = logs[1]
                where = {node: next((i for i, (a, b) in enumerate(zip(first, log)) if a != b), min(len(first), len(log)))
                         for node, log in logs.items()}
                out.append(f"{topic}-{p}: sizes {({n: len(log) for n, log in logs.items()})}, first difference {where}")
    return out


@pytest.mark.timeout(budget(240, 3600))
def test_acknowledged_records_survive_cluster_faults(start_cluster, tmp_path):
    assert set(FAULTS) <= {"kill", "pause"}, f"MOLDAU_CHAOS_FAULTS names unknown faults: {FAULTS}"
    rng, seed = seeded_random(f"cluster faults: {CYCLES} cycles of each of {FAULTS}")
    cluster = start_cluster(3, etcd_session_timeout_ms=SESSION_TIMEOUT_MS, min_insync_replicas=2,
                            unclean_leader_election_enable="false")
    for topic in (TOPIC, PROBE_TOPIC):
        cluster.create_topic(topic, partitions=PARTITIONS, replication_factor=3, **TOPIC_CONFIG)
    bootstrap = ",".join(b.bootstrap for b in cluster.brokers.values())  # all three, whichever is down
    journal = tmp_path / "journal"
    started = time.monotonic()
    faults: list[dict] = []
    probe = Probe(bootstrap)
    workloads = [WorkloadProcess("idempotent-producer", bootstrap, journal, name, topic=TOPIC,
                                 partitions=PARTITIONS, rate=rate) for name, rate in PRODUCERS]
    try:
        kinds = FAULTS * CYCLES
        for cycle, kind in enumerate(kinds):
            before = journal_lines(journal)
            wait_for(lambda: journal_lines(journal) > before + 100, 90, f"acknowledgements before cycle {cycle + 1}")
            for w in workloads:
                assert w.alive(), f"{w.name} exited:\n{w.stderr_tail()}"
            role = rng.choice(["leader", "follower", "controller"])
            node = pick_target(cluster, rng, role)
            broker = cluster.brokers[node]
            time.sleep(rng.uniform(0.0, 1.0))
            t0 = time.monotonic()
            if kind == "kill":
                broker.kill()
                time.sleep(rng.uniform(0.0, 2.0))
                broker.restart()
            else:
                os.kill(broker.pid, signal.SIGSTOP)
                try:
                    time.sleep(SESSION_TIMEOUT_MS / 1000 + rng.uniform(1.0, 3.0))
                finally:
                    os.kill(broker.pid, signal.SIGCONT)
            wait_healthy(cluster)
            faults.append({"kind": kind, "role": role, "node": node, "start": t0, "healthy": time.monotonic()})
            print(f"cycle {cycle + 1}: {kind} of the {role} (node {node}), healthy after "
                  f"{faults[-1]['healthy'] - t0:.1f}s")
        before = journal_lines(journal)
        wait_for(lambda: journal_lines(journal) > before + 100, 90, "acknowledgements after the last fault")
        loop_end = time.monotonic()
        for w in workloads:
            assert w.stop(150) == 0, f"{w.name} failed:\n{w.stderr_tail()}"
        probe.stop()
    finally:
        for w in workloads:
            w.kill()

    verdict = assert_verified(bootstrap, journal)
    assert not verdict["notes"], verdict["notes"]  # every record sent was acknowledged in the end
    # No producer is left and every broker fetches: the replicas catch up to identical logs.
    wait_healthy(cluster)
    try:
        cluster.wait_until(lambda: not divergent_partitions(cluster), 60, "identical replicas")
    except AssertionError:
        raise AssertionError("replicas diverge:\n" + "\n".join(divergent_partitions(cluster))) from None

    assert [rc for b in cluster.brokers.values() for rc in b.returncodes].count(-9) == kinds.count("kill")
    windows: dict[str, float] = {}
    for i, f in enumerate(faults):
        end = faults[i + 1]["start"] if i + 1 < len(faults) else loop_end
        key = f"{f['kind']} {f['role']}"
        windows[key] = round(max(windows.get(key, 0.0), probe.worst_gap(f["start"], end)), 2)
    stats = verdict["stats"]
    record_result(
        "cluster_faults",
        seed=seed,
        cycles={kind: sum(f["kind"] == kind for f in faults) for kind in FAULTS},
        targets={key: sum(f"{f['kind']} {f['role']}" == key for f in faults) for key in sorted(windows)},
        records_checked=stats["read_committed"],
        acks_checked=stats["acks"],
        probe_acks=sum(len(t) for t in probe.acked.values()),
        violations=verdict["violations"],
        divergent_replicas=0,
        worst_unavailability_s=windows,
        seconds=round(time.monotonic() - started, 1),
    )
