"""Cluster benchmarks: `python -m bench.cluster [--quick] [--out DIR]`.

One etcd and three Moldau brokers on 127.0.0.1 (broker/cluster/local_etcd.py), stock confluent-kafka:

* produce throughput of an idempotent producer (linger.ms 5), RF=3 acks=all (min.insync.replicas=2)
  against RF=1 acks=1 on the same cluster and against the wire ceiling (bench/ceiling.py): 1 KiB to
  1 and 6 partitions, 100 B to one;
* ack latency p50/p99/max at a steady 5,000 msg/s: RF=1 acks=1, RF=3 acks=all with an idempotent
  producer (100 B, 1 KiB), with librdkafka's default producer (not idempotent, a deep pipeline) at
  linger.ms 0, with every client default (linger.ms 5), and RF=3 acks=1;
* leader failover: an idempotent acks=all producer sends a message every 10 ms; the time from the
  last ack before the leader is killed (kill -9, then a SIGTERM controlled shutdown) to the first after.

Every measurement runs in each of 3 rounds (2 with --quick), the order rotating; the best round is
printed, each round's p99 and the load average beside it. Prints a table and writes results.json to --out (default bench/results/cluster-<time>/).
`make bench` runs it after the side-by-side rows.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from bench.standalone import arguments
from broker.cluster.local_etcd import LocalEtcd, free_port

REPO_ROOT = Path(__file__).resolve().parent.parent
SESSION_TIMEOUT_MS = 6000


class ClusterUnderTest:
    def __init__(self, workdir: Path, size: int = 3, overrides: dict[str, str] | None = None) -> None:
        self.workdir = workdir
        self.overrides = overrides or {}
        self.etcd = LocalEtcd(workdir / "etcd")
        self.ports = {node: free_port() for node in range(1, size + 1)}
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
                     f"etcd.session.timeout.ms={SESSION_TIMEOUT_MS}", "min.insync.replicas=2",
                     *(f"{k}={v}" for k, v in self.overrides.items())):
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
        """min.insync.replicas is the brokers' 2, or 1 on one replica (where acks=all is then acks=1)."""
        admin = self.admin()
        configs = {"min.insync.replicas": "1"} if rf == 1 else {}
        admin.create_topics([NewTopic(name, partitions, rf, config=configs)])[name].result(30)
        deadline = time.monotonic() + 30
        while True:
            ps = admin.list_topics(name, timeout=10).topics[name].partitions
            if len(ps) == partitions and all(p.leader >= 0 and len(p.isrs) == rf for p in ps.values()):
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


def make_producer(bootstrap: str, **config) -> Producer:
    return Producer({"bootstrap.servers": bootstrap, **{k.replace("_", "."): v for k, v in config.items()}})


def throughput(bootstrap: str, topic: str, partitions: int, size: int, count: int, **config) -> float:
    """Messages per second of ``count`` messages of ``size`` bytes, message i to partition i % partitions."""
    producer = make_producer(bootstrap, **config)
    value = b"x" * size
    failed = []
    started = time.perf_counter()
    for i in range(count):
        while True:
            try:
                producer.produce(topic, value, partition=i % partitions,
                                 on_delivery=lambda err, m: err and failed.append(err))
                break
            except BufferError:
                producer.poll(0.01)
    if producer.flush(120) or failed:
        raise RuntimeError(f"{topic}: {len(failed)} failed deliveries, e.g. {failed[:1]}")
    return count / (time.perf_counter() - started)


def steady(bootstrap: str, topic: str, rate: int, seconds: float, size: int = 100, **config) -> dict:
    """Ack latencies (ms: p50, p99, max) of ``rate`` msg/s for ``seconds`` to partition 0, and the rate kept."""
    latencies: list[float] = []
    producer = make_producer(bootstrap, **config)

    def delivered(err, msg) -> None:
        if err is None:
            latencies.append(msg.latency() * 1000)

    for _ in range(100):  # connections, metadata, the producer id
        producer.produce(topic, b"w" * size, partition=0)
    producer.flush(30)
    latencies.clear()
    value = b"x" * size
    started = time.monotonic()
    sent = 0
    while (now := time.monotonic()) - started < seconds:
        while sent < int((now - started) * rate):
            try:
                producer.produce(topic, value, partition=0, on_delivery=delivered)
                sent += 1
            except BufferError:
                break
        producer.poll(0.0005)
    producer.flush(120)
    elapsed = time.monotonic() - started
    latencies.sort()
    pick = lambda p: latencies[min(len(latencies) - 1, int(len(latencies) * p))] if latencies else float("nan")
    return {"p50": pick(0.5), "p99": pick(0.99), "max": latencies[-1] if latencies else float("nan"),
            "acked": len(latencies), "kept_rate": len(latencies) / elapsed}


def failover(cluster, topic: str, how: str) -> float:
    """Seconds from the last ack before the leader goes to the first ack after."""
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True,
                         "linger.ms": 0, "message.timeout.ms": 120000, "retry.backoff.ms": 50})
    acks: list[float] = []
    producer.poll(0)
    for _ in range(50):
        producer.produce(topic, b"z", partition=0, on_delivery=lambda err, m: err or acks.append(time.monotonic()))
        producer.poll(0.01)
    producer.flush(30)
    leader = cluster.leader(topic)
    proc = cluster.procs[leader]
    killed_at = time.monotonic()
    proc.send_signal(signal.SIGKILL if how == "kill" else signal.SIGTERM)
    before = len(acks)
    deadline = time.monotonic() + 60
    while len(acks) <= before + 5 and time.monotonic() < deadline:
        producer.produce(topic, b"z", partition=0, on_delivery=lambda err, m: err or acks.append(time.monotonic()))
        producer.poll(0.01)
    producer.flush(60)
    proc.wait(30)
    last_before = max((t for t in acks if t <= killed_at), default=killed_at)
    first_after = min(t for t in acks if t > killed_at)
    cluster.start_broker(leader)
    return first_after - last_before


IDEMPOTENT = {"enable_idempotence": True, "linger_ms": 5}
# (row, topic, partitions, message size, producer config): each against RF=1 acks=1 on the same cluster
THROUGHPUT_ROWS = [
    ("produce 1 KiB, 1 partition", 1, 1024, IDEMPOTENT),
    ("produce 1 KiB, 6 partitions", 6, 1024, IDEMPOTENT),
    ("produce 100 B, 1 partition", 1, 100, IDEMPOTENT),
]
RATE = 5000
# (row, replication factor, message size, producer config) at a steady RATE msg/s
LATENCY_ROWS = [
    ("RF=1 (acks=all: one replica), idempotent, 100 B", 1, 100,
     {"acks": "all", "enable_idempotence": True, "linger_ms": 0}),
    ("RF=3 acks=all, idempotent, 100 B", 3, 100, {"acks": "all", "enable_idempotence": True, "linger_ms": 0}),
    ("RF=3 acks=all, idempotent, 1 KiB", 3, 1024, {"acks": "all", "enable_idempotence": True, "linger_ms": 0}),
    ("RF=3 acks=all, not idempotent, linger.ms=0", 3, 100, {"acks": "all", "linger_ms": 0}),
    ("RF=3 every client default (linger.ms 5)", 3, 100, {}),
    ("RF=3 acks=1, 100 B", 3, 100, {"acks": "1", "linger_ms": 0}),
]


def rotated(items: list, round_: int) -> list:
    """Each round starts one row later: no row always runs first (or right after another)."""
    k = round_ % len(items)
    return items[k:] + items[:k]


def main(argv=None) -> int:
    from bench.targets import Target

    quick, out = arguments("cluster", __doc__.splitlines()[0], argv)
    scale, seconds, rounds = (10, 3, 2) if quick else (1, 10, 3)
    runs: dict = {"throughput": {}, "latency": {}, "load_average": []}
    with tempfile.TemporaryDirectory(prefix="moldau-bench-cluster-") as tmp:
        cluster = ClusterUnderTest(Path(tmp)).start()
        ceiling = Target("ceiling", Path(tmp) / "ceiling").start()
        try:
            ceiling_admin = AdminClient({"bootstrap.servers": ceiling.bootstrap})
            for rf in (1, 3):
                for partitions in (1, 6):
                    cluster.create_topic(f"rf{rf}-p{partitions}", rf, partitions)
                    ceiling_admin.create_topics([NewTopic(f"rf{rf}-p{partitions}", partitions, 1)])[
                        f"rf{rf}-p{partitions}"].result(30)
            measurements = []
            for row, partitions, size, config in THROUGHPUT_ROWS:
                count = (200_000 if size <= 100 else 50_000) // scale
                # librdkafka's idempotent producer takes acks=all only; on one replica it is acks=1
                # (the ceiling server answers at once whatever acks says)
                for side, bootstrap, acks, rf in (("rf1_acks1", cluster.bootstrap, "all", 1),
                                                  ("rf3_acks_all", cluster.bootstrap, "all", 3),
                                                  ("ceiling", ceiling.bootstrap, "all", 1)):
                    measurements.append(("throughput", row, side, lambda b=bootstrap, t=f"rf{rf}-p{partitions}",
                                         p=partitions, s=size, n=count, c={**config, "acks": acks}:
                                         throughput(b, t, p, s, n, **c)))
            for row, rf, size, config in LATENCY_ROWS:
                measurements.append(("latency", row, "", lambda t=f"rf{rf}-p1", s=size, c=config:
                                     steady(cluster.bootstrap, t, RATE, seconds, s, **c)))
            for round_ in range(rounds):
                for kind, row, side, measure in rotated(measurements, round_):
                    load = os.getloadavg()[0]
                    runs["load_average"].append(load)
                    result = measure()
                    runs[kind].setdefault(row, {}).setdefault(side, []).append(
                        {"msgs_per_s": result, "load": load} if kind == "throughput" else {**result, "load": load})
            cluster.create_topic("failover", 3)
            killed = failover(cluster, "failover", "kill")
            time.sleep(2)
            stopped = failover(cluster, "failover", "term")
        finally:
            ceiling.stop()
            cluster.stop()
    runs["failover_s"] = {"kill_9": killed, "sigterm": stopped, "etcd_session_timeout_s": SESSION_TIMEOUT_MS / 1000}
    (out / "results.json").write_text(json.dumps(runs, indent=2) + "\n")
    loads = runs["load_average"]
    print(f"{rounds} interleaved rounds, the best of each kept; load average {min(loads):.1f}-{max(loads):.1f}")
    print(f"{'throughput, msg/s':<34}{'RF=1 acks=1':>13}{'RF=3 acks=all':>15}{'ratio':>7}{'ceiling':>10}{'RF3/ceil':>10}")
    for row, sides in runs["throughput"].items():
        best = {side: max(r["msgs_per_s"] for r in rs) for side, rs in sides.items()}
        print(f"{row:<34}{best['rf1_acks1']:>13.0f}{best['rf3_acks_all']:>15.0f}"
              f"{best['rf3_acks_all'] / best['rf1_acks1']:>7.2f}{best['ceiling']:>10.0f}"
              f"{best['rf3_acks_all'] / best['ceiling']:>10.2f}")
    print(f"{'ack latency at a steady rate, ms':<44}{'p50':>7}{'p99':>8}{'max':>8}{'kept msg/s':>12}   p99 of each round")
    for row, sides in runs["latency"].items():
        rs = sides[""]
        best = min(rs, key=lambda r: r["p99"])
        print(f"{row:<44}{best['p50']:>7.2f}{best['p99']:>8.2f}{best['max']:>8.1f}{best['kept_rate']:>12.0f}   "
              + ", ".join(f"{r['p99']:.1f} (load {r['load']:.1f})" for r in rs))
    print(f"failover, last ack to first ack: kill -9 {killed:.2f} s "
          f"(session timeout {SESSION_TIMEOUT_MS / 1000:.0f} s), SIGTERM {stopped:.2f} s")
    print(f"results in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
