"""Compaction benchmarks, Moldau alone: `python -m bench.compaction [--quick] [--out DIR]`.

Three measurements, each against a fresh broker on a temporary data dir:

* cleaner throughput: MB of log a cleaning pass reads per second (the broker's
  "cleaned ... MB read ... in N s" line), over a log of 1 KiB records whose
  keys repeat;
* produce p99 (one 100 B message at a time, acks=all, delivery report) with the
  log cleaner busy on another topic versus idle, as a ratio in the same run;
* startup time against offset commits ever made: the restart after N commits
  with the cleaner off (everything replayed) and after compaction (live keys).

Prints a table and writes results.json to --out (default bench/results/compaction-<time>/).
`make bench` runs it after the side-by-side rows.
"""

from __future__ import annotations

import argparse
import json
import re
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

REPO_ROOT = Path(__file__).resolve().parent.parent
HOST = "127.0.0.1"
# log.cleaner.io.max.bytes.per.second while produce p99 is measured: slow enough that the pass lasts the sample
P99_CLEANER_RATE = 20_000_000


class Broker:
    """A Moldau subprocess with Kafka config overrides, restartable on its data dir."""

    def __init__(self, workdir: Path, **overrides) -> None:
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        with socket.socket() as s:
            s.bind((HOST, 0))
            self.port = s.getsockname()[1]
        self.overrides = {"listeners": f"PLAINTEXT://{HOST}:{self.port}", "log.dirs": str(workdir / "data"),
                          **{k.replace("_", "."): v for k, v in overrides.items()}}
        self.log_path = workdir / "broker.log"
        self.proc: subprocess.Popen | None = None

    @property
    def bootstrap(self) -> str:
        return f"{HOST}:{self.port}"

    def start(self) -> float:
        """Start and wait until it listens; returns the seconds that took."""
        started = time.monotonic()
        self._mark = self.log_path.stat().st_size if self.log_path.exists() else 0
        args = [sys.executable, "-m", "broker", "serve"]
        for name, value in self.overrides.items():
            args += ["--override", f"{name}={value}"]
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(args, cwd=REPO_ROOT, stdout=log, stderr=subprocess.STDOUT)
        self.wait_for("listening on", timeout=300)
        return time.monotonic() - started

    def log_text(self) -> str:
        with open(self.log_path, errors="replace") as f:
            f.seek(self._mark)
            return f.read()

    def wait_for(self, pattern: str, timeout: float) -> re.Match:
        deadline = time.monotonic() + timeout
        while True:
            match = re.search(pattern, self.log_text())
            if match:
                return match
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"no {pattern!r} in {self.log_path}")
            time.sleep(0.05)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(60)


def _create(bootstrap: str, topic: str, partitions: int = 1, **configs: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1, config=configs)])[topic].result(30)


def _alter(bootstrap: str, topic: str, **configs: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    entries = [ConfigEntry(n.replace("_", "."), v, incremental_operation=AlterConfigOpType.SET)
               for n, v in configs.items()]
    (future,) = admin.incremental_alter_configs([ConfigResource(ConfigResource.Type.TOPIC, topic,
                                                                incremental_configs=entries)]).values()
    future.result(30)


def _fill(bootstrap: str, topic: str, megabytes: float, keys: int = 1000) -> None:
    """Keyed 1 KiB records, every key repeated: what compaction removes most of."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "compression.type": "none"})
    value = b"v" * 1024
    for i in range(int(megabytes * 1000)):
        while True:
            try:
                producer.produce(topic, key=b"key-%d" % (i % keys), value=value)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(120) == 0


def cleaner_throughput(workdir: Path, megabytes: float) -> dict:
    broker = Broker(workdir, log_cleaner_backoff_ms=200)
    broker.start()
    try:
        _create(broker.bootstrap, "cleaned", **{"segment.bytes": str(1 << 20)})
        _fill(broker.bootstrap, "cleaned", megabytes)
        _alter(broker.bootstrap, "cleaned", cleanup_policy="compact")
        match = broker.wait_for(r"cleaned cleaned-0 below offset \d+: (\d+) segment\(s\) rewritten, (\d+) record\(s\) "
                                r"removed, ([\d.]+) MB read, ([\d.]+) MB written in ([\d.]+) s", timeout=600)
    finally:
        broker.stop()
    read_mb, seconds = float(match[3]), max(float(match[5]), 0.001)
    return {"log_mb": megabytes, "mb_read": read_mb, "mb_written": float(match[4]), "seconds": seconds,
            "records_removed": int(match[2]), "mb_per_s": read_mb / seconds}


def _produce_p99(bootstrap: str, topic: str, count: int, until=lambda: False) -> float:
    """p99 ms of ``count`` one-message produces (fewer if ``until()`` turns true first)."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": "all", "socket.nagle.disable": True})
    samples = []
    for _ in range(count):
        if until():
            break
        sent = time.perf_counter()
        producer.produce(topic, value=b"x" * 100, on_delivery=lambda err, m: None)
        producer.flush(30)
        samples.append(time.perf_counter() - sent)
    samples.sort()
    return samples[int(len(samples) * 0.99) - 1] * 1000


def produce_p99(workdir: Path, megabytes: float, count: int, rate: int) -> dict:
    broker = Broker(workdir, log_cleaner_backoff_ms=200, log_cleaner_io_max_bytes_per_second=rate)
    broker.start()
    try:
        _create(broker.bootstrap, "latency")
        _create(broker.bootstrap, "cleaned", **{"segment.bytes": str(1 << 20)})
        _fill(broker.bootstrap, "cleaned", megabytes)
        _produce_p99(broker.bootstrap, "latency", 200)  # warm-up
        idle = _produce_p99(broker.bootstrap, "latency", count)
        _alter(broker.bootstrap, "cleaned", cleanup_policy="compact")
        broker.wait_for("cleaning cleaned-0 below offset", timeout=60)
        samples = []
        busy = _produce_p99(broker.bootstrap, "latency", count,
                            until=lambda: samples.append(1) or "cleaned cleaned-0 below" in broker.log_text())
    finally:
        broker.stop()
    return {"cleaner_rate_bytes_per_s": rate, "idle_p99_ms": idle, "cleaning_p99_ms": busy, "ratio": busy / idle,
            "samples_while_cleaning": len(samples) - 1}


def _commit(bootstrap: str, commits: int, partitions: int = 100) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-commits"})
    for n in range(1, commits + 1):
        offsets = [TopicPartition("tracked", p, n) for p in range(partitions)]
        while True:
            try:
                consumer.commit(offsets=offsets, asynchronous=n % 100 != 0)
                break
            except BufferError:
                consumer.poll(0.05)
    consumer.close()


def startup(workdir: Path, commits: int) -> dict:
    """Restart times after ``commits`` x 100 offset commits: replaying everything, then after compaction."""
    broker = Broker(workdir, offsets_topic_num_partitions=1, offsets_topic_segment_bytes=1 << 20,
                    log_cleaner_enable="false")
    broker.start()
    _create(broker.bootstrap, "tracked", 100)
    _commit(broker.bootstrap, commits)
    broker.stop()
    before_s = broker.start()
    records_before = int(broker.wait_for(r"__consumer_offsets \((\d+) records\)", 10)[1])
    broker.stop()
    broker.overrides["log.cleaner.enable"] = "true"
    broker.overrides["log.cleaner.backoff.ms"] = "200"
    broker.start()
    broker.wait_for("cleaned __consumer_offsets-0 below offset", timeout=600)
    broker.stop()
    after_s = broker.start()
    records_after = int(broker.wait_for(r"__consumer_offsets \((\d+) records\)", 10)[1])
    broker.stop()
    return {"offsets_committed": commits * 100, "startup_s_uncompacted": before_s, "records_uncompacted": records_before,
            "startup_s_compacted": after_s, "records_compacted": records_after, "ratio": after_s / before_s}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.compaction", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="ten times less data: a smoke run")
    parser.add_argument("--out", type=Path, default=None, help="where results.json goes")
    args = parser.parse_args(argv)
    scale = 0.1 if args.quick else 1.0
    out = args.out or REPO_ROOT / "bench" / "results" / time.strftime("compaction-%Y%m%d-%H%M%S")
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        results = {
            "cleaner_throughput": cleaner_throughput(Path(tmp) / "throughput", 100 * scale),
            "produce_p99": produce_p99(Path(tmp) / "p99", 100 * scale, int(3000 * scale) or 300, P99_CLEANER_RATE),
            "startup": startup(Path(tmp) / "startup", int(10_000 * scale)),
        }
    (out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    t, p, s = results["cleaner_throughput"], results["produce_p99"], results["startup"]
    print(f"cleaner throughput   {t['mb_per_s']:8.1f} MB/s   ({t['mb_read']:.1f} MB read, "
          f"{t['records_removed']} records removed in {t['seconds']:.1f} s)")
    print(f"produce p99          {p['cleaning_p99_ms']:8.2f} ms cleaning / {p['idle_p99_ms']:.2f} ms idle "
          f"= {p['ratio']:.2f}x ({p['samples_while_cleaning']} samples during a pass at "
          f"{p['cleaner_rate_bytes_per_s'] / 1e6:.0f} MB/s)")
    print(f"startup              {s['startup_s_compacted']:8.2f} s compacted / {s['startup_s_uncompacted']:.2f} s "
          f"uncompacted after {s['offsets_committed']} offset commits ({s['records_compacted']} vs "
          f"{s['records_uncompacted']} records replayed)")
    print(f"results: {out / 'results.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
