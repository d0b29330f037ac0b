"""Where an acks=all write's time goes: `python -m bench.stages [--quick] [--out DIR]`.

A 3-broker cluster (bench/cluster.py) with the brokers' stage timestamps on (broker/cluster/stages.py,
`log.level=INFO,moldau.stages=DEBUG`), one RF=3 topic (min.insync.replicas=2), an idempotent
confluent-kafka producer at a steady rate (acks=all, linger.ms=0, 100 B). Each acknowledged batch is
followed through the logs: the leader reads the request -> leader append -> records read for a follower's fetch -> the follower has
them -> appended -> its next fetch sent -> that fetch at the leader -> high watermark -> answer
written. For each step the median and p99 over the batches (of the slower follower, the one the high
watermark waits for), and the client's ack latency; each broker's garbage collector pauses. The load average is printed beside the figures.
"""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
import time
from bisect import bisect_left
from collections import defaultdict
from pathlib import Path

from bench.cluster import ClusterUnderTest, steady
from bench.standalone import arguments

TOPIC = "stages"
_GC = re.compile(r"moldau\.stages: gc (\d) (\d+\.\d+) (\d+\.\d+)")
_LINE = re.compile(r"moldau\.stages: (\S+) (\S+)-(\d+) (-?\d+) (\d+\.\d+)(?: replica (\d+))?")
STEPS = [
    ("request read -> leader append", "read", "appended"),
    ("append -> read for the follower", "appended", "sent"),
    ("read -> the follower has it", "sent", "received"),
    ("follower append", "received", "f-appended"),
    ("follower append -> next fetch sent", "f-appended", "fetch-sent"),
    ("fetch sent -> at the leader", "fetch-sent", "follower-fetch"),
    ("at the leader -> high watermark", "follower-fetch", "high-watermark"),
    ("high watermark -> answer written", "high-watermark", "answered"),
    ("leader append -> answer written", "appended", "answered"),
    ("request read -> answer written", "read", "answered"),
]


class Series:
    """One broker's lines of one stage (and replica): offsets in time order, searched for the first at or
    past an offset."""

    def __init__(self) -> None:
        self.offsets: list[int] = []
        self.times: list[float] = []

    def add(self, offset: int, t: float) -> None:
        if self.offsets and offset < self.offsets[-1]:
            return  # (a truncation: not in a steady run)
        self.offsets.append(offset)
        self.times.append(t)

    def first_reaching(self, offset: int) -> float | None:
        i = bisect_left(self.offsets, offset)
        return self.times[i] if i < len(self.times) else None


def parse(path: Path) -> dict[tuple[str, int | None], Series]:
    series: dict = defaultdict(Series)
    for line in path.read_text(errors="replace").splitlines():
        m = _LINE.search(line)
        if m and m.group(2) == TOPIC:
            replica = int(m.group(6)) if m.group(6) else None
            series[(m.group(1), replica)].add(int(m.group(4)), float(m.group(5)))
    return series


def breakdown(cluster: ClusterUnderTest, leader: int) -> dict[str, list[float]]:
    logs = {node: parse(cluster.workdir / f"broker-{node}.log") for node in cluster.ports}
    lead = logs[leader]
    followers = [n for n in cluster.ports if n != leader]
    steps: dict[str, list[float]] = defaultdict(list)
    answered = lead[("answered", None)]
    appended = lead[("appended", None)]
    read = lead[("read", None)]
    for base, t_answered in zip(answered.offsets, answered.times, strict=False):
        end = next((o for o in appended.offsets[bisect_left(appended.offsets, base + 1):][:1]), None)
        if end is None:
            continue
        per_follower = []
        for f in followers:
            at = {
                "read": read.first_reaching(base),
                "appended": appended.first_reaching(end),
                "sent": lead[("sent", f)].first_reaching(end),
                "received": logs[f][("received", None)].first_reaching(end),
                "f-appended": logs[f][("appended", None)].first_reaching(end),
                "fetch-sent": logs[f][("fetch-sent", None)].first_reaching(end),
                "follower-fetch": lead[("follower-fetch", f)].first_reaching(end),
                "high-watermark": lead[("high-watermark", None)].first_reaching(end),
                "answered": t_answered,
            }
            if None not in at.values():
                per_follower.append(at)
        if len(per_follower) != len(followers):
            continue
        slower = max(per_follower, key=lambda at: at["follower-fetch"])
        for name, start, stop in STEPS:
            steps[name].append((slower[stop] - slower[start]) * 1000)
    return steps


def collections(cluster: ClusterUnderTest, since: float) -> dict[int, dict]:
    """Each broker's garbage collector pauses since ``since`` (CLOCK_MONOTONIC): count, total and longest."""
    found = {}
    for node in cluster.ports:
        text = (cluster.workdir / f"broker-{node}.log").read_text(errors="replace")
        pauses = [float(m.group(2)) for m in _GC.finditer(text) if float(m.group(3)) >= since]
        found[node] = {"pauses": len(pauses), "total_ms": sum(pauses), "max_ms": max(pauses, default=0.0)}
    return found


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * p))] if ordered else float("nan")


def main(argv=None) -> int:
    quick, out = arguments("stages", __doc__.splitlines()[0], argv)
    rate, seconds = (2000, 3) if quick else (5000, 10)
    with tempfile.TemporaryDirectory(prefix="moldau-bench-stages-") as tmp:
        cluster = ClusterUnderTest(Path(tmp), overrides={"log.level": "INFO,moldau.stages=DEBUG"}).start()
        try:
            cluster.create_topic(TOPIC, 3)
            leader = cluster.leader(TOPIC)
            load_before = os.getloadavg()
            started = time.monotonic()
            acks = steady(cluster.bootstrap, TOPIC, rate, seconds, acks="all", enable_idempotence=True, linger_ms=0)
            load_after = os.getloadavg()
            steps = breakdown(cluster, leader)
            pauses = collections(cluster, started)
        finally:
            cluster.stop()
    load = f"load average {load_before[0]:.1f} before, {load_after[0]:.1f} after"
    results = {"rate_msgs_per_s": rate, "seconds": seconds, "load_average": [load_before[0], load_after[0]],
               "ack_latency_ms": acks, "gc_pauses": pauses,
               "steps_ms": {name: {"p50": percentile(v, 0.5), "p99": percentile(v, 0.99), "batches": len(v)}
                            for name, v in steps.items()}}
    (out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    print(f"RF=3 acks=all, idempotent, {rate} msg/s x 100 B for {seconds} s; {load}")
    print(f"{'step (the slower follower)':<40}{'p50 ms':>9}{'p99 ms':>9}{'batches':>9}")
    for name, _, _ in STEPS:
        v = steps.get(name, [])
        print(f"{name:<40}{percentile(v, 0.5):>9.2f}{percentile(v, 0.99):>9.2f}{len(v):>9}")
    print(f"{'client ack latency':<40}{acks['p50']:>9.2f}{acks['p99']:>9.2f}{acks['acked']:>9}")
    for node, gc in pauses.items():
        print(f"broker {node}{' (leader)' if node == leader else ''}: {gc['pauses']} garbage collections, "
              f"{gc['total_ms']:.1f} ms in all, the longest {gc['max_ms']:.2f} ms")
    print(f"results in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
