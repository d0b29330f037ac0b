"""The cluster fault loop the tests in tests/reliability/test_cluster_*.py share.

A ``FaultLoop`` runs on a started three-broker cluster: a topic with RF=3,
min.insync.replicas=2, `verify.workloads` processes (every kind: idempotent
and transactional producers, a consumer group, the exactly-once copy app) and
a probe producer running throughout. ``run(kinds, inject)`` injects one fault
per cycle (``inject(loop, kind)`` does it and undoes it) and, after each,
waits for the cluster to get back to a full ISR, so min.insync.replicas can
always be met by the survivors of the next fault. ``finish()`` stops the
producers, lets the groups catch up, stops the consumers, runs `moldau
verify` and checks that every partition's three replicas hold byte-identical
logs (once caught up, the whole log is below the high watermark).
``figures()`` are the results summary's: cycles, targets, records checked,
the worst unavailability window per fault kind and target.

The probe (acks=all, one record per partition every 100 ms to its own topic)
measures the unavailability window of each fault: the longest gap between two
of its acknowledgements on a partition while that fault was in play.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from confluent_kafka import KafkaException, Producer

from helpers.reliability import (Workload, WorkloadProcess, assert_verified, group_caught_up, journal_lines,
                                 run_verify, seeded_random, wait_for)

TOPIC, COPY_TOPIC, PROBE_TOPIC, PARTITIONS = "chaos", "chaos-copy", "chaos-probe", 3
TOPIC_CONFIG = {"min_insync_replicas": 2, "unclean_leader_election_enable": "false"}
ROLES = ["leader", "follower", "controller"]
# What runs through the faults: every kind in verify.workloads (idempotent and transactional producers, a
# two-member consumer group, the exactly-once copy app), or idempotent producers alone.
IDEMPOTENT = [Workload("idempotent-producer", name, {"topic": TOPIC, "partitions": PARTITIONS, "rate": 300})
              for name in ("idem-0", "idem-1")]
EVERY_KIND = [
    *IDEMPOTENT,
    Workload("transactional-producer", "txn-0", {"topic": TOPIC, "partitions": PARTITIONS, "rate": 200,
                                                 "txn_size": 6, "abort_every": 4}),
    *(Workload("group-consumer", name, {"topic": TOPIC, "group": "chaos-readers"})
      for name in ("reader-0", "reader-1")),
    Workload("copy-app", "copy-0", {"topic": TOPIC, "output": COPY_TOPIC, "group": "chaos-copier"}),
]


class Probe:
    """acks=all records to every partition of PROBE_TOPIC every 100 ms; keeps when each was acknowledged."""

    def __init__(self, bootstrap: str) -> None:
        self.acked: dict[int, list[float]] = {p: [] for p in range(PARTITIONS)}
        self.config = {"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 0,
                       "message.timeout.ms": 300_000, "reconnect.backoff.max.ms": 500}
        self._producer = Producer(self.config)
        self.fatal_errors = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _delivered(self, err, msg) -> None:
        if err is None:
            self.acked[msg.partition()].append(time.monotonic())

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                for p in range(PARTITIONS):
                    self._producer.produce(PROBE_TOPIC, b"probe", partition=p, on_delivery=self._delivered)
                self._producer.poll(0.1)
            except KafkaException:  # fatal (after an unclean election): go on as a new producer
                self.fatal_errors += 1
                self._producer = Producer(self.config)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self._producer.flush(60)

    def worst_gap(self, start: float, end: float) -> float:
        """The longest time between two acknowledgements on one partition, of the gaps that ended in (start, end]."""
        worst = 0.0
        for times in self.acked.values():
            times = sorted(times)
            for before, after in zip(times, times[1:], strict=False):
                if start < after <= end:
                    worst = max(worst, after - before)
        return worst

    def acked_on_every_partition(self, start: float, end: float) -> bool:
        return all(any(start < t <= end for t in times) for times in self.acked.values())


class FaultLoop:
    def __init__(self, cluster, tmp_path: Path, what: str, unclean: bool = False,
                 plan: list[Workload] = EVERY_KIND) -> None:
        self.cluster = cluster
        self.rng, self.seed = seeded_random(what)
        config = {**TOPIC_CONFIG, "unclean_leader_election_enable": str(unclean).lower()}
        self.plan = list(plan)
        self.topics = [TOPIC, PROBE_TOPIC] + [COPY_TOPIC] * any("output" in w.options for w in plan)
        for topic in self.topics:
            cluster.create_topic(topic, partitions=PARTITIONS, replication_factor=3, **config)
        self.bootstrap = ",".join(b.bootstrap for b in cluster.brokers.values())  # all three, whichever is down
        self.journal = tmp_path / "journal"
        self.started = time.monotonic()
        self.faults: list[dict] = []
        self.loop_end = 0.0
        self.unclean = unclean
        self.probe = Probe(self.bootstrap)
        self.workloads = [self._start(w) for w in self.plan]

    def _start(self, w: Workload) -> WorkloadProcess:
        return WorkloadProcess(w.kind, self.bootstrap, self.journal, w.name, **w.options)

    def __enter__(self) -> "FaultLoop":
        return self

    def __exit__(self, *exc) -> None:
        for w in self.workloads:
            w.kill()

    # --- targets ---------------------------------------------------------------------------

    def pick_target(self, role: str | None = None) -> tuple[str, int]:
        """A role (random unless given) and the node of a broker playing it now: the leader or a follower of a
        random partition, or the controller."""
        role = role or self.rng.choice(ROLES)
        if role == "controller":
            return role, self.cluster.metadata().controller_id
        part = self.cluster.partition(TOPIC, self.rng.randrange(PARTITIONS))
        if role == "leader":
            return role, part.leader
        return role, self.rng.choice([r for r in part.replicas if r != part.leader])

    # --- the loop ---------------------------------------------------------------------------

    def wait_progress(self, what: str) -> None:
        before = journal_lines(self.journal)
        wait_for(lambda: self._all_alive() and journal_lines(self.journal) > before + 100, 90,
                 f"acknowledgements {what}")

    def _all_alive(self) -> bool:
        for i, w in enumerate(self.workloads):
            if not w.alive() and self.unclean:  # a producer whose acknowledged records a new leader lacks may
                # fail for good (OUT_OF_ORDER_SEQUENCE_NUMBER): another one takes over, its journal stays
                self.plan[i] = Workload(self.plan[i].kind, f"{w.name}+", self.plan[i].options)
                self.workloads[i] = self._start(self.plan[i])
            assert w.alive() or self.unclean, f"{w.name} exited:\n{w.stderr_tail()}"
        return True

    def wait_healthy(self, timeout: float = 90) -> None:
        """Every broker registered and every partition of both topics led with all three replicas in sync."""
        cluster = self.cluster
        cluster.wait_for_brokers(3, timeout)
        for topic in self.topics:
            cluster.wait_until(lambda: cluster.full_isr(topic, PARTITIONS, 3), timeout, f"{topic} fully replicated")

    def run(self, kinds: list[str], inject) -> None:
        """One cycle per kind: ``inject(self, kind)`` injects the fault and ends it, returning
        {"role", "node"} of its target; then the cluster must be healthy again."""
        for cycle, kind in enumerate(kinds):
            self.wait_progress(f"before cycle {cycle + 1}")
            time.sleep(self.rng.uniform(0.0, 1.0))
            t0 = time.monotonic()
            target = inject(self, kind)
            self.wait_healthy()
            self.faults.append({"kind": kind, **target, "start": t0, "healthy": time.monotonic()})
            print(f"cycle {cycle + 1}: {kind} of the {target['role']} (node {target['node']}), healthy after "
                  f"{self.faults[-1]['healthy'] - t0:.1f}s")
        self.wait_progress("after the last fault")
        self.loop_end = time.monotonic()

    def finish(self, must_pass: bool = True) -> dict:
        """Stop the clients; `moldau verify` (required to pass unless ``must_pass`` is false: its verdict is
        returned either way) and byte-identical replicas."""
        # producers first, consumers once their groups have caught up
        for w, process in zip(self.plan, self.workloads, strict=False):
            if not w.consumes:
                assert process.stop(150) == 0 or not must_pass, f"{w.name} failed:\n{process.stderr_tail()}"
        for group, topic in {(w.options["group"], w.options["topic"]) for w in self.plan if w.consumes}:
            wait_for(lambda: group_caught_up(self.bootstrap, group, topic, PARTITIONS), 120,
                     f"group {group} to catch up")
        for w, process in zip(self.plan, self.workloads, strict=False):
            if w.consumes:
                assert process.stop(60) == 0, f"{w.name} failed:\n{process.stderr_tail()}"
        self.probe.stop()
        if must_pass:
            verdict = assert_verified(self.bootstrap, self.journal)
            assert not verdict["notes"], verdict["notes"]  # every record sent was acknowledged in the end
        else:
            code, output, verdict = run_verify(self.bootstrap, self.journal)
            print(output)
            assert verdict is not None, f"moldau verify could not check (exit {code}):\n{output}"
        # No producer is left and every broker fetches: the replicas catch up to identical logs.
        self.wait_healthy()
        try:
            self.cluster.wait_until(lambda: not self.divergent_partitions(), 60, "identical replicas")
        except AssertionError:
            raise AssertionError("replicas diverge:\n" + "\n".join(self.divergent_partitions())) from None
        return verdict

    def divergent_partitions(self) -> list[str]:
        """Partitions whose replicas' logs differ, with the first differing byte position."""
        out = []
        nodes = list(self.cluster.brokers)
        for topic in self.topics:
            for p in range(PARTITIONS):
                logs = {node: self.cluster.log_bytes(node, topic, p) for node in nodes}
                if len(set(logs.values())) > 1:
                    first = logs[nodes[0]]
                    where = {node: next((i for i, (a, b) in enumerate(zip(first, log, strict=False)) if a != b),
                                        min(len(first), len(log))) for node, log in logs.items()}
                    out.append(f"{topic}-{p}: sizes {({n: len(log) for n, log in logs.items()})}, "
                               f"first difference {where}")
        return out

    def figures(self, verdict: dict) -> dict:
        """The results summary's figures of this loop."""
        windows: dict[str, float] = {}
        for i, f in enumerate(self.faults):
            end = self.faults[i + 1]["start"] if i + 1 < len(self.faults) else self.loop_end
            key = f"{f['kind']} {f['role']}"
            windows[key] = round(max(windows.get(key, 0.0), self.probe.worst_gap(f["start"], end)), 2)
        kinds = list(dict.fromkeys(f["kind"] for f in self.faults))
        stats = verdict["stats"]
        return {
            "seed": self.seed,
            "cycles": {kind: sum(f["kind"] == kind for f in self.faults) for kind in kinds},
            "targets": {key: sum(f"{f['kind']} {f['role']}" == key for f in self.faults) for key in sorted(windows)},
            "records_checked": stats.get("read_committed", 0),
            "acks_checked": stats.get("acks", 0),
            **{key: stats.get(key, 0) for key in ("txn_committed", "txn_aborted", "copies")},
            "group_offsets_checked": stats.get("group_partitions", 0),
            "probe_acks": sum(len(t) for t in self.probe.acked.values()),
            "probe_fatal_errors": self.probe.fatal_errors,
            "violations": verdict["violations"],
            "divergent_replicas": 0,
            "worst_unavailability_s": windows,
            "worst_recovery_s": round(max((f["healthy"] - f["start"] for f in self.faults), default=0.0), 1),
            "seconds": round(time.monotonic() - self.started, 1),
        }
