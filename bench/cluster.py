"""Cluster benchmarks: `python -m bench.cluster [--quick] [--out DIR]`.

One etcd and three Moldau brokers on 127.0.0.1 (broker/cluster/local_etcd.py), stock confluent-kafka:

* RF=3 acks=all (min.insync.replicas=2) against RF=1 acks=1 on the same cluster: produce throughput
  (100 B messages) and ack latency p50/p99 (one message at a time), as ratios in the same run;
* failover with default settings: an idempotent acks=all producer sends to six partitions every 10 ms
  while the leader of one is killed (kill -9, then a SIGTERM controlled shutdown): from the signal
  to the first ack on each partition it led, and the longest ack gap on those it only followed;
  then SIGSTOP of a leader: until the others' Metadata names other leaders for what it led;
* failover at scale: 3,000 partitions RF=3 (300 with --quick), kill -9 of broker 1: until every
  partition has a live leader, until no ISR names it, and from its restart until every ISR is full;
* each failover row with the machine's load average when it ran; each broker's event-loop stalls over
  the whole run (its lag histogram), the evidence for the session's keep-alive margin.

Prints a table and writes results.json to --out (default bench/results/cluster-<time>/).
`make bench` runs it after the side-by-side rows.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from bench.standalone import arguments
from broker.cluster.local_etcd import LocalEtcd, free_port

REPO_ROOT = Path(__file__).resolve().parent.parent


class ClusterUnderTest:
    def __init__(self, workdir: Path, size: int = 3) -> None:
        self.workdir = workdir
        self.etcd = LocalEtcd(workdir / "etcd")
        self.ports = {node: free_port() for node in range(1, size + 1)}
        self.metrics_ports = {node: free_port() for node in range(1, size + 1)}
        self.procs: dict[int, subprocess.Popen] = {}

    def start(self) -> "ClusterUnderTest":
        self.etcd.start()
        for node in self.ports:
            self.start_broker(node)
        deadline = time.monotonic() + 60
        while len(self.admin().list_topics(timeout=10).brokers) < len(self.ports):
            if time.monotonic() > deadline:
                raise RuntimeError("the brokers did not all register")
            time.sleep(0.2)
        return self

    def start_broker(self, node: int) -> None:
        port = self.ports[node]
        command = [sys.executable, "-m", "broker", "serve"]
        for item in (f"node.id={node}", f"listeners=PLAINTEXT://127.0.0.1:{port}",
                     f"log.dirs={self.workdir / f'broker-{node}'}", f"etcd.connect={self.etcd.endpoint}",
                     f"metrics.port={self.metrics_ports[node]}", "min.insync.replicas=2"):
            command += ["--override", item]
        log = open(self.workdir / f"broker-{node}.log", "ab")
        self.procs[node] = subprocess.Popen(command, cwd=REPO_ROOT, stdout=log, stderr=log,
                                            stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), 0.5).close()
                return
            except OSError:
                if time.monotonic() > deadline or self.procs[node].poll() is not None:
                    raise RuntimeError(f"broker {node} did not start; see {log.name}")
                time.sleep(0.1)

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{p}" for n, p in self.ports.items() if self.procs[n].poll() is None)

    def admin(self) -> AdminClient:
        return AdminClient({"bootstrap.servers": self.bootstrap})

    def create_topic(self, name: str, rf: int, partitions: int = 1) -> None:
        admin = self.admin()
        admin.create_topics([NewTopic(name, partitions, rf)])[name].result(30)
        self.wait_for_full_isrs(name, partitions, rf)

    def wait_for_full_isrs(self, name: str, partitions: int, rf: int) -> None:
        admin = self.admin()
        deadline = time.monotonic() + 30
        while True:
            found = admin.list_topics(name, timeout=10).topics[name].partitions
            if len(found) == partitions and all(p.leader >= 0 and len(p.isrs) == rf for p in found.values()):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name} not fully replicated")
            time.sleep(0.2)

    def leader(self, topic: str) -> int:
        return self.admin().list_topics(topic, timeout=10).topics[topic].partitions[0].leader

    def stop(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                p.kill()
                p.wait(10)
        self.etcd.stop()


def throughput(cluster, topic: str, acks: str, count: int) -> float:
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": acks, "linger.ms": 5})
    value = b"x" * 100
    started = time.perf_counter()
    for _ in range(count):
        while True:
            try:
                producer.produce(topic, value, partition=0)
                break
            except BufferError:
                producer.poll(0.01)
    producer.flush(120)
    return count / (time.perf_counter() - started)


def ack_latency(cluster, topic: str, acks: str, count: int) -> tuple[float, float]:
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": acks, "linger.ms": 0})
    samples = []
    for _ in range(count):
        started = time.perf_counter()
        producer.produce(topic, b"y" * 100, partition=0)
        producer.flush(30)
        samples.append((time.perf_counter() - started) * 1000)
    samples.sort()
    return samples[len(samples) // 2], samples[min(len(samples) - 1, int(len(samples) * 0.99))]


FAILOVER_PARTITIONS = 6  # each broker leads two and follows four


def failover(cluster, topic: str, how: str) -> dict:
    """An idempotent acks=all producer sends to every partition every 10 ms while the leader of partition 0 is
    killed (kill -9) or stopped (SIGTERM): for the partitions it led, seconds from the signal to the first ack after (median,
    max); for the partitions it only followed, the longest gap between acks; for all, the longest gap."""
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True,
                         "linger.ms": 0, "message.timeout.ms": 120000, "retry.backoff.ms": 20,
                         "retry.backoff.max.ms": 100, "topic.metadata.refresh.interval.ms": 200})
    acks: dict[int, list[float]] = {p: [] for p in range(FAILOVER_PARTITIONS)}

    def send():
        for p in range(FAILOVER_PARTITIONS):
            producer.produce(topic, b"z", partition=p,
                             on_delivery=lambda err, m: err or acks[m.partition()].append(time.monotonic()))
        producer.poll(0.01)

    for _ in range(30):
        send()
    producer.flush(30)
    cluster.wait_for_full_isrs(topic, FAILOVER_PARTITIONS, 3)
    partitions = cluster.admin().list_topics(topic, timeout=10).topics[topic].partitions
    victim = partitions[0].leader
    led = [p for p, md in partitions.items() if md.leader == victim]
    followed = [p for p, md in partitions.items() if md.leader != victim and victim in md.replicas]
    proc = cluster.procs[victim]
    signalled = time.monotonic()
    proc.send_signal(signal.SIGKILL if how == "kill" else signal.SIGTERM)
    while time.monotonic() < signalled + 6:
        send()
    producer.flush(60)
    proc.wait(30)

    def gap(p: int) -> float:
        times = [signalled - 0.01] + [t for t in acks[p] if t >= signalled - 0.01]
        return max(b - a for a, b in zip(times, times[1:]))

    firsts = sorted(min(t for t in acks[p] if t > signalled) - signalled for p in led)
    cluster.start_broker(victim)
    return {"led": led, "first_ack_s_median": firsts[len(firsts) // 2] if firsts else None,
            "first_ack_s_max": firsts[-1] if firsts else None,
            "followed_longest_gap_s": max((gap(p) for p in followed), default=None),
            "longest_gap_s": max(gap(p) for p in acks)}


def stopped_leader(cluster, topic: str) -> float:
    """SIGSTOP of the leader of partition 0: seconds until the others' Metadata names other leaders for every
    partition it led (its session must expire: nothing refuses); then SIGCONT, and it follows again."""
    cluster.wait_for_full_isrs(topic, FAILOVER_PARTITIONS, 3)
    partitions = cluster.admin().list_topics(topic, timeout=10).topics[topic].partitions
    victim = partitions[0].leader
    led = [p for p, md in partitions.items() if md.leader == victim]
    others = AdminClient({"bootstrap.servers": ",".join(f"127.0.0.1:{port}" for n, port in cluster.ports.items()
                                                         if n != victim)})
    proc = cluster.procs[victim]
    stopped = time.monotonic()
    proc.send_signal(signal.SIGSTOP)
    try:
        while time.monotonic() < stopped + 60:
            found = others.list_topics(topic, timeout=10).topics[topic].partitions
            if all(found[p].leader not in (-1, victim) for p in led):
                return time.monotonic() - stopped
            time.sleep(0.1)
        return float("inf")
    finally:
        proc.send_signal(signal.SIGCONT)
        cluster.wait_for_full_isrs(topic, FAILOVER_PARTITIONS, 3)


def failover_at_scale(cluster, partitions: int) -> dict:
    """kill -9 of broker 1 with ``partitions`` partitions (RF=3): seconds until every partition has a live
    leader, until no ISR names it, and from its restart until every ISR is full again (metadata polled)."""
    admin = cluster.admin()
    admin.create_topics([NewTopic("scale", partitions, 3)])["scale"].result(120)
    victim = 1

    def states():
        md = AdminClient({"bootstrap.servers": ",".join(f"127.0.0.1:{p}" for n, p in cluster.ports.items()
                                                         if n != victim or cluster.procs[n].poll() is None)})
        return list(md.list_topics("scale", timeout=20).topics["scale"].partitions.values())

    def until(check, timeout: float) -> float:
        started = time.monotonic()
        while time.monotonic() < started + timeout:
            found = states()
            if len(found) == partitions and check(found):
                return time.monotonic() - started
            time.sleep(0.1)
        return float("inf")

    until(lambda ps: all(len(p.isrs) == 3 for p in ps), 120)
    before = loop_stalls(cluster)
    killed = time.monotonic()
    cluster.procs[victim].kill()
    cluster.procs[victim].wait(10)
    led = until(lambda ps: all(p.leader not in (-1, victim) for p in ps), 60)
    isrs = time.monotonic() - killed + until(lambda ps: all(victim not in p.isrs for p in ps), 60)
    restarted = time.monotonic()
    cluster.start_broker(victim)
    full = time.monotonic() - restarted + until(lambda ps: all(len(p.isrs) == 3 for p in ps), 120)
    after = loop_stalls(cluster)
    # the survivors' event loops from the kill to full ISRs: samples late by over 0.1 s and over 1 s
    stalls = {node: [after[node][k] - before[node][k] for k in ("over_0.1s", "over_1s")]
              for node in before if node != victim and node in after}
    return {"partitions": partitions, "re_led_s": led, "isrs_without_it_s": isrs, "isrs_full_after_restart_s": full,
            "survivors_late_samples_over_0.1s_1s": stalls}


def loop_stalls(cluster) -> dict:
    """Per live broker, from its event-loop lag histogram (sampled every 0.5 s since it started): how many
    samples were late by more than 0.1 s and 1 s, and the bucket bound the worst one stays under."""
    found = {}
    for node, port in cluster.metrics_ports.items():
        if cluster.procs[node].poll() is not None:
            continue
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
            text = reply.read().decode()
        buckets = [(float(m[1]), float(m[2])) for m in re.finditer(
            r'^moldau_event_loop_lag_seconds_bucket\{le="([^"]+)"\} (\S+)', text, re.M)]
        total = buckets[-1][1]
        below = {bound: count for bound, count in buckets}
        worst = next(bound for bound, count in buckets if count == total)
        found[node] = {"samples": total, "over_0.1s": total - below[0.1], "over_1s": total - below[1.0],
                       "worst_under_s": worst}
    return found


def load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def main(argv=None) -> int:
    quick, out = arguments("cluster", __doc__.splitlines()[0], argv)
    count, samples = (2000, 50) if quick else (20000, 300)
    with tempfile.TemporaryDirectory(prefix="moldau-bench-cluster-") as tmp:
        cluster = ClusterUnderTest(Path(tmp)).start()
        try:
            cluster.create_topic("rf1", 1)
            cluster.create_topic("rf3", 3)
            rf1 = throughput(cluster, "rf1", "1", count)
            rf3 = throughput(cluster, "rf3", "all", count)
            lat1 = ack_latency(cluster, "rf1", "1", samples)
            lat3 = ack_latency(cluster, "rf3", "all", samples)
            cluster.create_topic("failover", 3, FAILOVER_PARTITIONS)
            load_kill = load()
            killed = failover(cluster, "failover", "kill")
            time.sleep(2)
            load_term = load()
            stopped = failover(cluster, "failover", "term")
            time.sleep(2)
            load_stop = load()
            paused = stopped_leader(cluster, "failover")
            time.sleep(2)
            load_scale = load()
            scale = failover_at_scale(cluster, 300 if quick else 3000)
            stalls = loop_stalls(cluster)
        finally:
            cluster.stop()
    results = {
        "produce_msgs_per_s": {"rf1_acks1": rf1, "rf3_acks_all": rf3, "ratio": rf3 / rf1},
        "ack_latency_ms": {"rf1_acks1": {"p50": lat1[0], "p99": lat1[1]},
                           "rf3_acks_all": {"p50": lat3[0], "p99": lat3[1]},
                           "ratio_p50": lat3[0] / lat1[0], "ratio_p99": lat3[1] / lat1[1]},
        "failover_s": {"kill_9": killed, "sigterm": stopped, "sigstop": paused, "etcd_session_timeout_s": "default",
                       "at_scale": scale, "load_average": {"kill_9": load_kill, "sigterm": load_term, "sigstop": load_stop,
                                                           "at_scale": load_scale}},
        "event_loop_stalls": stalls,
    }
    (out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    print(f"{'row':<44}{'RF=1 acks=1':>14}{'RF=3 acks=all':>16}{'ratio':>8}")
    print(f"{'produce, 100 B messages/s':<44}{rf1:>14.0f}{rf3:>16.0f}{rf3 / rf1:>8.2f}")
    print(f"{'ack latency p50, ms':<44}{lat1[0]:>14.1f}{lat3[0]:>16.1f}{lat3[0] / lat1[0]:>8.2f}")
    print(f"{'ack latency p99, ms':<44}{lat1[1]:>14.1f}{lat3[1]:>16.1f}{lat3[1] / lat1[1]:>8.2f}")
    for name, row, at in (("kill -9", killed, load_kill), ("SIGTERM", stopped, load_term)):
        print(f"failover, {name} of a leader (load {at}): first ack on each partition it led: median "
              f"{row['first_ack_s_median']:.2f} s, max {row['first_ack_s_max']:.2f} s; longest ack gap on the "
              f"partitions it followed {row['followed_longest_gap_s']:.2f} s, on any {row['longest_gap_s']:.2f} s")
    print(f"SIGSTOP of a leader (load {load_stop}): other leaders for all it led after {paused:.2f} s "
          f"(session timeout 9 s)")
    print(f"failover at {scale['partitions']} partitions RF=3, kill -9 (load {load_scale}): re-led "
          f"{scale['re_led_s']:.2f} s, ISRs without it {scale['isrs_without_it_s']:.2f} s, ISRs full "
          f"{scale['isrs_full_after_restart_s']:.2f} s after its restart; the survivors' loop samples late by "
          f"over 0.1 s / 1 s meanwhile: {scale['survivors_late_samples_over_0.1s_1s']}")
    for node, row in stalls.items():
        print(f"broker {node} event loop, whole run: {row['samples']:.0f} samples, {row['over_0.1s']:.0f} late by over "
              f"0.1 s, {row['over_1s']:.0f} by over 1 s, worst under {row['worst_under_s']} s")
    print(f"results in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
