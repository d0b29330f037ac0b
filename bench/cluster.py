"""Cluster benchmarks: `python -m bench.cluster [--quick] [--out DIR]`.

One etcd and three Moldau brokers on 127.0.0.1 (broker/cluster/local_etcd.py), stock confluent-kafka:

* RF=3 acks=all (min.insync.replicas=2) against RF=1 acks=1 on the same cluster: produce throughput
  (100 B messages) and ack latency p50/p99 (one message at a time), as ratios in the same run;
* leader failover: an idempotent acks=all producer sends a message every 10 ms; the time from the
  last ack before the leader is killed (kill -9, then a SIGTERM controlled shutdown) to the first after.

Prints a table and writes results.json to --out (default bench/results/cluster-<time>/).
`make bench` runs it after the side-by-side rows.
"""

from __future__ import annotations

import json
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

    def create_topic(self, name: str, rf: int) -> None:
        admin = self.admin()
        admin.create_topics([NewTopic(name, 1, rf)])[name].result(30)
        deadline = time.monotonic() + 30
        while True:
            p = admin.list_topics(name, timeout=10).topics[name].partitions.get(0)
            if p is not None and p.leader >= 0 and len(p.isrs) == rf:
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
            cluster.create_topic("failover", 3)
            killed = failover(cluster, "failover", "kill")
            time.sleep(2)
            stopped = failover(cluster, "failover", "term")
        finally:
            cluster.stop()
    results = {
        "produce_msgs_per_s": {"rf1_acks1": rf1, "rf3_acks_all": rf3, "ratio": rf3 / rf1},
        "ack_latency_ms": {"rf1_acks1": {"p50": lat1[0], "p99": lat1[1]},
                           "rf3_acks_all": {"p50": lat3[0], "p99": lat3[1]},
                           "ratio_p50": lat3[0] / lat1[0], "ratio_p99": lat3[1] / lat1[1]},
        "failover_s": {"kill_9": killed, "sigterm": stopped, "etcd_session_timeout_s": SESSION_TIMEOUT_MS / 1000},
    }
    (out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    print(f"{'row':<44}{'RF=1 acks=1':>14}{'RF=3 acks=all':>16}{'ratio':>8}")
    print(f"{'produce, 100 B messages/s':<44}{rf1:>14.0f}{rf3:>16.0f}{rf3 / rf1:>8.2f}")
    print(f"{'ack latency p50, ms':<44}{lat1[0]:>14.1f}{lat3[0]:>16.1f}{lat3[0] / lat1[0]:>8.2f}")
    print(f"{'ack latency p99, ms':<44}{lat1[1]:>14.1f}{lat3[1]:>16.1f}{lat3[1] / lat1[1]:>8.2f}")
    print(f"failover, last ack to first ack: kill -9 {killed:.2f} s "
          f"(session timeout {SESSION_TIMEOUT_MS / 1000:.0f} s), SIGTERM {stopped:.2f} s")
    print(f"results in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
