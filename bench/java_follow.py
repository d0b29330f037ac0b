"""A stock Java consumer of 2,000 partitions, with and without fetch sessions: `python -m bench.java_follow`.

The `2,000 partitions` rows of `python -m bench` drive the broker with a fetch loop on our codec
(librdkafka never opens a session). This checks what Java kafka-clients 3.9 do instead, with their
defaults (fetch.min.bytes 1, fetch.max.wait.ms 500, max.poll.records 500), the same client and
config in every column; only the broker differs: `max.incremental.fetch.session.cache.slots` 1000
(the Java client keeps a session) or 0 (every fetch is full). A third column runs the producer alone.

Each column gets a fresh broker: a topic of 2,000 partitions with one record each, a Java consumer
(`followCount` in tests/java/ClientConformance.java) assigned all of them from the beginning, and,
once it has read those, a confluent-kafka producer sending 10 records a second to each partition for
``--seconds`` (acks=1, linger.ms 1000 as in the bench rows: a batch of ~10 records a partition a
second). Measured over that window: the broker's CPU seconds per second and per delivered record,
Fetch requests per second (from the broker's metrics), the Java process's CPU. The consumer then
reads to the end and must have got every record exactly once (no duplicate or skipped offset).
Columns are interleaved over ``--rounds`` rounds.

Needs Java and the jars `make test-deps` installs (tests/helpers/java_clients.py).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

import psutil
from confluent_kafka import Producer

from bench.compaction import Broker, _create
from bench.targets import free_port
from bench.workloads import FOLLOW_LINGER_MS, send
from tests.helpers.java_clients import JavaClients

TOPIC = "follow"
PARTITIONS = 2000
RATE = 10  # records a second per partition
SETTLE_S = 5  # after the first records: the new partitions' first writes are not the producer's cost
COLUMNS = {"producer alone": None, "Java consumer, sessions": 1000, "Java consumer, sessionless": 0}


def _fetches(metrics_port: int) -> tuple[int, float]:
    """Fetch requests answered so far, and the seconds they took in all (arrival to response)."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).read().decode()
    count = re.search(r'kafka_network_requestmetrics_requests_total\{request="Fetch"\} ([0-9.e+]+)', text)
    total = re.search(r'kafka_network_requestmetrics_totaltime_seconds_sum\{request="Fetch"\} ([0-9.e+]+)', text)
    return (int(float(count.group(1))), float(total.group(1))) if count else (0, 0.0)


def _produce_paced(bootstrap: str, seconds: float) -> int:
    """RATE records a second to every partition, in ticks of 10 ms; the records sent."""
    p = Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": FOLLOW_LINGER_MS})
    per_tick, value, sent = PARTITIONS * RATE // 100, b"v" * 100, 0
    started = time.monotonic()
    for tick in range(int(seconds * 100)):
        for _ in range(per_tick):
            send(p, TOPIC, value, sent % PARTITIONS)
            sent += 1
        p.poll(0)
        time.sleep(max(0.0, started + (tick + 1) / 100 - time.monotonic()))
    assert p.flush(60) == 0, "records left undelivered"
    return sent


def column(workdir: Path, java: JavaClients, slots: int | None, seconds: float) -> dict:
    metrics_port = free_port()
    broker = Broker(workdir, metrics_port=metrics_port,
                    **({} if slots is None else {"max_incremental_fetch_session_cache_slots": slots}))
    broker.start()
    try:
        _create(broker.bootstrap, TOPIC, PARTITIONS)
        warmup = Producer({"bootstrap.servers": broker.bootstrap, "acks": 1, "linger.ms": 5})
        for p in range(PARTITIONS):
            warmup.produce(TOPIC, value=b"first", partition=p)
        assert warmup.flush(60) == 0
        time.sleep(SETTLE_S)
        sent = int(seconds * 100) * (PARTITIONS * RATE // 100)
        consumer = None
        if slots is not None:
            consumer = subprocess.Popen(java.command(broker.bootstrap, "followCount", TOPIC, PARTITIONS, PARTITIONS,
                                                     PARTITIONS + sent),
                                        stdout=subprocess.PIPE, stderr=open(workdir / "java.log", "w"), text=True)
            for line in consumer.stdout:
                if json.loads(line)["op"] == "caughtUp":
                    break
            else:
                raise RuntimeError(f"the Java consumer ended early; see {workdir / 'java.log'}")
        server = psutil.Process(broker.proc.pid)
        client = psutil.Process(consumer.pid) if consumer else None
        cpu0, client0, fetches0 = sum(server.cpu_times()[:2]), client and sum(client.cpu_times()[:2]), \
            _fetches(metrics_port)
        start = time.monotonic()
        assert _produce_paced(broker.bootstrap, seconds) == sent
        elapsed = time.monotonic() - start
        cpu = sum(server.cpu_times()[:2]) - cpu0
        client_cpu = client and sum(client.cpu_times()[:2]) - client0
        fetches, fetch_time = (a - b for a, b in zip(_fetches(metrics_port), fetches0, strict=False))
        result = {"seconds": elapsed, "records": sent, "broker_cpu_per_s": cpu / elapsed,
                  "broker_us_per_record": cpu / sent * 1e6, "fetches_per_s": fetches / elapsed,
                  "fetch_ms": fetch_time / fetches * 1000 if fetches else None}
        if consumer:
            out, _ = consumer.communicate(timeout=300)
            counted = next(json.loads(line) for line in out.splitlines() if '"counted"' in line)
            if consumer.returncode or counted["duplicates"] or counted["gaps"] \
                    or counted["records"] != PARTITIONS + sent:
                raise RuntimeError(f"the Java consumer got {counted} (exit {consumer.returncode})")
            result["client_cpu_per_s"] = client_cpu / elapsed
        return result
    finally:
        broker.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="moldau-java-follow-") as tmp:
        java = JavaClients.build(Path(tmp))
        results: dict[str, list[dict]] = {name: [] for name in COLUMNS}
        for r in range(args.rounds):
            for name, slots in COLUMNS.items():
                m = column(Path(tmp) / f"{r}-{slots}", java, slots, args.seconds)
                results[name].append(m)
                print(f"round {r + 1} {name:28} broker {m['broker_cpu_per_s']:.3f} CPU-s/s "
                      f"({m['broker_us_per_record']:.1f} us/record), {m['fetches_per_s']:.1f} fetches/s"
                      + (f" of {m['fetch_ms']:.0f} ms" if m["fetch_ms"] else "")
                      + (f", Java client {m['client_cpu_per_s']:.3f} CPU-s/s" if "client_cpu_per_s" in m else ""),
                      flush=True)
    alone = [m["broker_cpu_per_s"] for m in results["producer alone"]]
    for r in range(args.rounds):
        with_s = results["Java consumer, sessions"][r]["broker_cpu_per_s"] - alone[r]
        without = results["Java consumer, sessionless"][r]["broker_cpu_per_s"] - alone[r]
        print(f"round {r + 1}: the consumer's broker CPU (less the producer alone): sessions {with_s:.3f}, "
              f"sessionless {without:.3f} CPU-s/s: {without / with_s if with_s > 0 else float('nan'):.2f}x")


if __name__ == "__main__":
    main()
