"""TLS against plaintext: `python -m bench.tls [--quick] [--out DIR]`.

One Moldau broker with two listeners, PLAINTEXT and SSL (certificates made by trustme for the run),
driven by stock confluent-kafka clients: produce N x 1 KiB (acks=all, idempotent, linger.ms=5, one
partition) through each listener, then consume the topic back from the beginning (assign, no group).
Repeats alternate the listeners and the best of each is kept, so the TLS/plaintext ratios compare runs
made under the same load. Every row checks what it measured (deliveries, high watermark, bytes read).

Prints a table and writes results.json to --out (default bench/results/tls-<time>/).
`make bench` runs it after the side-by-side rows.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import trustme
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from bench.standalone import arguments
from broker.cluster.local_etcd import free_port

REPO_ROOT = Path(__file__).resolve().parent.parent
VALUE = b"v" * 1024


def start_broker(workdir: Path, plain: int, tls: int, ca: trustme.CA) -> subprocess.Popen:
    server = workdir / "server.pem"
    ca.issue_cert("localhost", "127.0.0.1").private_key_and_cert_chain_pem.write_to_path(server)
    command = [sys.executable, "-m", "broker", "serve"]
    for item in (f"listeners=PLAINTEXT://127.0.0.1:{plain},SSL://127.0.0.1:{tls}", f"log.dirs={workdir / 'data'}",
                 f"ssl.keystore.location={server}"):
        command += ["--override", item]
    log = open(workdir / "broker.log", "ab")
    proc = subprocess.Popen(command, cwd=REPO_ROOT, stdout=log, stderr=log, stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while f":{tls} (SSL)".encode() not in (workdir / "broker.log").read_bytes():
        if time.monotonic() > deadline or proc.poll() is not None:
            raise RuntimeError(f"the broker did not start; see {log.name}")
        time.sleep(0.1)
    return proc


def produce(conf: dict, topic: str, count: int) -> float:
    """Messages a second; raises if any was not acknowledged."""
    producer = Producer({**conf, "acks": "all", "enable.idempotence": True, "linger.ms": 5})
    failed = []
    started = time.perf_counter()
    for _ in range(count):
        while True:
            try:
                producer.produce(topic, VALUE, partition=0, on_delivery=lambda err, m: err and failed.append(err))
                break
            except BufferError:
                producer.poll(0.01)
    if producer.flush(120) or failed:
        raise RuntimeError(f"produce to {topic}: {len(failed)} failed, {producer.flush(0)} undelivered")
    return count / (time.perf_counter() - started)


def consume(conf: dict, topic: str, count: int) -> float:
    """Messages a second from the first to the last; raises unless exactly count x 1 KiB came back."""
    consumer = Consumer({**conf, "group.id": "bench-tls", "enable.auto.commit": False,
                         "fetch.queue.backoff.ms": 10})
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    got = size = 0
    first = None
    deadline = time.monotonic() + 120
    while got < count and time.monotonic() < deadline:
        for m in consumer.consume(10000, 0.5):
            if m.error() is None:
                first = first or time.perf_counter()
                got += 1
                size += len(m.value())
    elapsed = time.perf_counter() - (first or time.perf_counter())
    high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
    consumer.close()
    if (got, size, high) != (count, count * len(VALUE), count):
        raise RuntimeError(f"consume {topic}: {got} messages, {size} bytes, high watermark {high}; expected {count}")
    return count / elapsed


def main(argv=None) -> int:
    quick, out = arguments("tls", __doc__.splitlines()[0], argv)
    count, repeats = (20_000, 1) if quick else (200_000, 3)
    best: dict[tuple[str, str], float] = {}
    with tempfile.TemporaryDirectory(prefix="moldau-bench-tls-") as tmp:
        ca = trustme.CA()
        ca.cert_pem.write_to_path(Path(tmp) / "ca.pem")
        plain, tls = free_port(), free_port()
        clients = {"plaintext": {"bootstrap.servers": f"127.0.0.1:{plain}"},
                   "tls": {"bootstrap.servers": f"127.0.0.1:{tls}", "security.protocol": "SSL",
                           "ssl.ca.location": str(Path(tmp) / "ca.pem")}}
        broker = start_broker(Path(tmp), plain, tls, ca)
        try:
            for repeat in range(repeats):
                order = list(clients) if repeat % 2 == 0 else list(reversed(clients))
                for listener in order:
                    topic = f"{listener}-{repeat}"
                    for row, run in (("produce", produce), ("consume", consume)):
                        rate = run(clients[listener], topic, count)
                        best[row, listener] = max(best.get((row, listener), 0.0), rate)
        finally:
            broker.kill()
            broker.wait(10)
    results = {row: {"plaintext_msgs_per_s": best[row, "plaintext"], "tls_msgs_per_s": best[row, "tls"],
                     "ratio": best[row, "tls"] / best[row, "plaintext"]} for row in ("produce", "consume")}
    results["messages"], results["repeats"] = count, repeats
    (out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    print(f"{'row (1 KiB messages, 1 partition)':<40}{'plaintext':>12}{'TLS':>12}{'TLS/plain':>11}")
    for row in ("produce", "consume"):
        r = results[row]
        print(f"{row + ', msg/s':<40}{r['plaintext_msgs_per_s']:>12.0f}{r['tls_msgs_per_s']:>12.0f}{r['ratio']:>11.2f}")
    print(f"results in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
