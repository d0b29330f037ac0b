"""Steady state at scale: `python -m bench.scale [--quick] [--sizes 1000,5000,10000] [--profile] [--out DIR]`.

One etcd and three Moldau brokers (bench/cluster.py's cluster, default settings), RF=3. The cluster grows
through each size in turn (topics of 1,000 partitions each, created in one CreateTopics), and at each:

* waits until every partition has a leader and a full ISR (Metadata for all topics, polled);
* idle CPU: each broker's CPU seconds per second (psutil) over --idle seconds with no client traffic;
* Metadata from a real client (confluent-kafka's list_topics): all topics, and one topic, 5 times each;
  and the broker's part of it: all topics over a bare connection to each broker, the answer not decoded;
* the brokers' event-loop stalls meanwhile (from their moldau_event_loop_lag_seconds histograms: the bound
  the worst sample in each window stayed under);
* with --profile, a py-spy recording of broker 1 over the idle window (summarized: where idle CPU goes).

Prints a table, with the load average before each row, and writes results.json to --out (default
bench/results/scale-<time>/). `make bench` runs it last.
"""

from __future__ import annotations

import argparse
import json
import socket
import struct
import sys
import tempfile
import time
from pathlib import Path

import psutil
from confluent_kafka.admin import AdminClient, NewTopic

from bench.cluster import ClusterUnderTest, lag_histograms, load_average
from bench.profile import Recording, summarize
from bench.standalone import RESULTS
from protocol.frames import encode_request

TOPIC_PARTITIONS = 1000
METADATA_TRIES = 5


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.scale", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1,000 and 2,000 partitions, 10 s idle")
    parser.add_argument("--sizes", default=None, help="partition counts, ascending (default 1000,5000,10000)")
    parser.add_argument("--idle", type=float, default=None, help="seconds of idle CPU sampling (default 25)")
    parser.add_argument("--profile", action="store_true", help="py-spy broker 1 over each idle window")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    args.sizes = [int(s) for s in (args.sizes or ("1000,2000" if args.quick else "1000,5000,10000")).split(",")]
    args.idle = args.idle or (10 if args.quick else 25)
    args.out = args.out or RESULTS / f"scale-{time.strftime('%Y%m%d-%H%M%S')}"
    args.out.mkdir(parents=True, exist_ok=True)
    return args


def grow(cluster: ClusterUnderTest, have: int, want: int) -> None:
    """Topics scale-<i> of TOPIC_PARTITIONS partitions (RF=3), one CreateTopics each, until ``want``
    partitions exist (on a loaded machine one request of 9,000 partitions outlasts a client's patience)."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap, "socket.timeout.ms": 300_000})
    for i in range(have // TOPIC_PARTITIONS, want // TOPIC_PARTITIONS):
        name = f"scale-{i}"
        admin.create_topics([NewTopic(name, TOPIC_PARTITIONS, 3)], request_timeout=300)[name].result(360)


def wait_full(cluster: ClusterUnderTest, partitions: int, timeout: float = 300) -> float:
    """Seconds until Metadata shows ``partitions`` partitions of scale-* topics, each led with a full ISR."""
    admin = cluster.admin()
    started = time.monotonic()
    while time.monotonic() < started + timeout:
        topics = admin.list_topics(timeout=60).topics
        found = [p for name, t in topics.items() if name.startswith("scale-") for p in t.partitions.values()]
        if len(found) == partitions and all(p.leader >= 0 and len(p.isrs) == 3 for p in found):
            return time.monotonic() - started
        time.sleep(1)
    raise RuntimeError(f"{partitions} partitions not fully replicated after {timeout} s")


def worst_lag(before: dict, after: dict) -> dict[int, float]:
    """Per broker, the histogram bound its worst lag sample between two readings stayed under (the loop
    is sampled every 0.5 s, so every stall longer than that shows)."""
    worst = {}
    for node, buckets in after.items():
        counts = [(bound, n - m) for (bound, n), (_, m) in zip(buckets, before[node], strict=True)]
        worst[node] = next(bound for bound, n in counts if n == counts[-1][1])
    return worst


def idle_cpu(cluster: ClusterUnderTest, seconds: float) -> dict[int, float]:
    """Each broker's CPU cores used (user + system) over ``seconds`` with no client traffic."""
    procs = {node: psutil.Process(p.pid) for node, p in cluster.procs.items()}
    before = {node: sum(p.cpu_times()[:2]) for node, p in procs.items()}
    started = time.monotonic()
    time.sleep(seconds)
    elapsed = time.monotonic() - started
    return {node: (sum(p.cpu_times()[:2]) - before[node]) / elapsed for node, p in procs.items()}


def metadata_ms(bootstrap: str, topic: str | None) -> list[float]:
    """Milliseconds for a Metadata round trip (all topics, or one), each try on a new client (so none is
    answered from librdkafka's cache); the client's connection set-up is done before the timed call."""
    times = []
    for _ in range(METADATA_TRIES):
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.list_topics("scale-0", timeout=60)  # connected, ApiVersions done
        started = time.perf_counter()
        admin.list_topics(topic, timeout=60)
        times.append((time.perf_counter() - started) * 1000)
    return times


def metadata_wire_ms(port: int) -> list[float]:
    """Milliseconds from a Metadata v12 request for all topics to the last byte of its answer, on one
    connection to one broker, not decoded: the broker's part of metadata_ms (the first may be made anew,
    the rest kept answers)."""
    times = []
    with socket.create_connection(("127.0.0.1", port), 60) as sock:
        for correlation_id in range(1, METADATA_TRIES + 1):
            request = encode_request("Metadata", 12, correlation_id, "bench-scale", {
                "topics": None, "allow_auto_topic_creation": False, "include_topic_authorized_operations": False})
            started = time.perf_counter()
            sock.sendall(request)
            size = struct.unpack(">i", _read(sock, 4))[0]
            _read(sock, size)
            times.append((time.perf_counter() - started) * 1000)
    return times


def _read(sock: socket.socket, n: int) -> bytes:
    chunks = []
    while n:
        chunk = sock.recv(min(n, 1 << 20))
        if not chunk:
            raise EOFError("the broker closed the connection")
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def measure(cluster: ClusterUnderTest, partitions: int, args, out: Path) -> dict:
    row: dict = {"partitions": partitions, "load_average_before": load_average()}
    row["full_isrs_s"] = wait_full(cluster, partitions)
    time.sleep(5)  # the creation's aftermath (checkpoints, ISR expansions) settles
    lags = lag_histograms(cluster)
    if args.profile:
        path = out / f"idle-broker1-{partitions}.txt"
        with Recording(cluster.procs[1].pid, path) as recording:
            row["idle_cores"] = idle_cpu(cluster, args.idle)
        row["profile"] = summarize(path, recording.seconds, 20)
    else:
        row["idle_cores"] = idle_cpu(cluster, args.idle)
    row["idle_max_loop_lag_s"] = worst_lag(lags, lags := lag_histograms(cluster))
    bootstrap = f"127.0.0.1:{cluster.ports[1]}"
    row["metadata_all_ms"] = metadata_ms(bootstrap, None)
    row["metadata_one_ms"] = metadata_ms(bootstrap, "scale-0")
    row["metadata_wire_ms"] = {node: metadata_wire_ms(port) for node, port in cluster.ports.items()}
    row["metadata_max_loop_lag_s"] = worst_lag(lags, lag_histograms(cluster))
    row["load_average_after"] = load_average()
    return row


def main(argv=None) -> int:
    args = parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="moldau-bench-scale-") as tmp:
        cluster = ClusterUnderTest(Path(tmp)).start()
        try:
            have = 0
            for size in args.sizes:
                grow(cluster, have, size)
                have = size
                rows.append(measure(cluster, size, args, args.out))
                print(json.dumps(rows[-1], indent=1), flush=True)
        finally:
            cluster.stop()
    (args.out / "results.json").write_text(json.dumps(rows, indent=2) + "\n")
    print(f"3 brokers, RF=3, one etcd; idle {args.idle:.0f} s; Metadata {METADATA_TRIES} tries (best, worst)")
    print(f"{'partitions':>10}{'load before':>16}{'idle cores per broker':>26}{'Metadata all, ms':>20}"
          f"{'one topic, ms':>16}{'wire, ms':>18}{'longest loop stall idle / Metadata, s':>40}")
    for r in rows:
        cores = " ".join(f"{c:.3f}" for c in r["idle_cores"].values())
        print(f"{r['partitions']:>10}{r['load_average_before']:>16}{cores:>26}"
              f"{min(r['metadata_all_ms']):>9.1f} {max(r['metadata_all_ms']):>9.1f}"
              f"{min(r['metadata_one_ms']):>7.1f} {max(r['metadata_one_ms']):>7.1f}"
              f"{min(min(t) for t in r['metadata_wire_ms'].values()):>8.1f} "
              f"{max(max(t) for t in r['metadata_wire_ms'].values()):>8.1f}"
              f"{max(r['idle_max_loop_lag_s'].values()):>20.3f} / {max(r['metadata_max_loop_lag_s'].values()):.3f}")
        if "profile" in r:
            print(r["profile"])
    print(f"results in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
