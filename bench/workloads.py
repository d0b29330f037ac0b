"""Client side of the benchmark: one workload per process, stock confluent-kafka clients.

Run as ``python -m bench.workloads '<json spec>'``; the last line of stdout
is a JSON object ``{"valid": bool, "reason": str|None, "metrics": {...}, "warnings": [...]}``.
Every workload checks what it measured (watermarks, counts, bytes) after the
clock stopped, and reports ``valid: false`` with the reason when a check fails.
"""

from __future__ import annotations

import json
import math
import random
import socket
import sys
import threading
import time
from typing import Callable

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

from protocol import frames
from protocol.records import read_header

from .targets import read_frame

POOL = 1024  # distinct payloads per run, cycled
BATCH = 10_000  # messages per Consumer.consume() call
_WORDS = ("order invoice customer account payment shipped pending region north south east west "
          "total amount currency euro status active retry queue item sku price quantity tax").split()


class Invalid(Exception):
    """A check failed: the numbers of this run do not mean what they claim."""


def payloads(size: int, count: int = POOL, seed: int = 7) -> list[bytes]:
    """JSON-like values of exactly ``size`` bytes, distinct; lz4 compresses a batch of them about 2.5:1."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        head = b'{"id":%d,"user":"u%06d","body":"' % (i, rng.randrange(10**6))
        words = " ".join(rng.choice(_WORDS) for _ in range(size // 4 + 1)).encode()
        out.append((head + words)[: size - 2] + b'"}')
    return out


def client_config(spec: dict, **extra) -> dict:
    return {"bootstrap.servers": spec["bootstrap"], "broker.address.family": "v4",
            "log.connection.close": False, **extra}


def consumer(spec: dict, **extra) -> Consumer:
    return Consumer(client_config(spec, **{"group.id": f"bench-{spec['topic']}", "enable.auto.commit": False,
                                           **extra}))


def ensure_topic(spec: dict, partitions: int) -> None:
    admin = AdminClient(client_config(spec))
    for future in admin.create_topics([NewTopic(spec["topic"], partitions, 1)]).values():
        future.result(30)
    deadline = time.monotonic() + 30
    while len(admin.list_topics(spec["topic"], timeout=10).topics[spec["topic"]].partitions) < partitions:
        if time.monotonic() > deadline:
            raise Invalid(f"topic {spec['topic']} never showed {partitions} partitions")
        time.sleep(0.1)


def expected_per_partition(count: int, partitions: int) -> list[int]:
    """Messages per partition when message i goes to partition i % partitions."""
    return [count // partitions + (p < count % partitions) for p in range(partitions)]


def check_watermarks(spec: dict, expected: list[int], warnings: list[str]) -> None:
    """The high watermark of every partition (as Fetch reports it) must equal the messages written to it.

    Topics are fresh, so the log starts at offset 0 and the high watermark is
    the message count. Each partition's last expected record is fetched, which
    also proves it is there. ListOffsets(latest) must say the same; when it
    does not, that is kept as a warning (the data itself checked out).
    """
    topic, parts = spec["topic"], range(len(expected))
    c = consumer(spec, **{"auto.offset.reset": "error"})
    try:
        c.list_topics(topic, timeout=10)  # spares assign() librdkafka's 500 ms leader-query timer
        c.assign([TopicPartition(topic, p, max(expected[p] - 1, 0)) for p in parts])
        pending = {p for p in parts if expected[p]}
        deadline = time.monotonic() + 30
        while pending and time.monotonic() < deadline:
            for m in c.consume(1000, 0.5):
                if m.error() is not None:
                    raise Invalid(f"fetching the last records: {m.error()}")
                pending.discard(m.partition())
        if pending:
            raise Invalid(f"partitions {sorted(pending)[:4]} have no record at their last expected offset")
        fetched = [c.get_watermark_offsets(TopicPartition(topic, p), cached=True)[1] for p in parts]
    finally:
        c.close()
    listed = latest_offsets(spec, len(expected))
    if fetched != expected:
        raise Invalid(f"high watermarks add up to {sum(fetched)} ({fetched[:4]}...), expected {sum(expected)}")
    if listed != fetched:
        warnings.append(f"ListOffsets(latest) adds up to {sum(listed)}, the Fetch high watermarks to {sum(fetched)}")


def latest_offsets(spec: dict, partitions: int) -> list[int]:
    """ListOffsets(latest) for every partition, in one request."""
    wanted = [TopicPartition(spec["topic"], p) for p in range(partitions)]
    admin = AdminClient(client_config(spec))  # must outlive its futures
    answers = admin.list_offsets({tp: OffsetSpec.latest() for tp in wanted}, request_timeout=30)
    return [answers[tp].result(30).offset for tp in wanted]


def send(producer: Producer, topic: str, value: bytes, partition: int) -> None:
    """produce(), waiting for room when the client's queue is full."""
    while True:
        try:
            producer.produce(topic, value, partition=partition)
            return
        except BufferError:
            producer.poll(0.005)


def flush(producer: Producer, timeout_s: float) -> None:
    left = producer.flush(timeout_s)
    if left:
        raise Invalid(f"{left} messages still undelivered after {timeout_s:.0f} s")


def phase_start(spec: dict) -> float:
    """Start of the measured phase. With ``metered`` set, say "ready" and wait for the orchestrator's
    "go": it starts its meters (server CPU and RSS, py-spy) in between, so they leave out the setup."""
    if spec.get("metered"):
        print("ready", flush=True)
        sys.stdin.readline()
    return time.perf_counter()


def phase_end(spec: dict) -> float:
    """End of the measured phase: "measured" stops the orchestrator's meters before the checks run."""
    now = time.perf_counter()
    if spec.get("metered"):
        print("measured", flush=True)
    return now


def fail_on_errors(errors: list[str]) -> None:
    if errors:
        raise Invalid(f"client errors: {errors[:3]}")


# --- workloads: each takes its spec and a list for warnings, and returns its metrics


def produce(spec: dict, warnings: list[str]) -> dict:
    """``count`` messages of ``size`` bytes, message i to partition i % partitions, then flush."""
    n, size, parts, topic = spec["count"], spec["size"], spec["partitions"], spec["topic"]
    ensure_topic(spec, parts)
    errors: list[str] = []
    p = Producer(client_config(spec, **{
        "acks": "all", "linger.ms": 5, "enable.idempotence": spec["idempotent"],
        "compression.type": spec["compression"], "queue.buffering.max.messages": 1_000_000,
        "queue.buffering.max.kbytes": 1 << 20, "error_cb": lambda e: errors.append(str(e))}))
    values = payloads(size)
    produce_, mask = p.produce, POOL - 1
    start = phase_start(spec)
    for i in range(n):
        try:
            produce_(topic, values[i & mask], partition=i % parts)
        except BufferError:
            send(p, topic, values[i & mask], i % parts)
    flush(p, spec["timeout_s"])
    elapsed = phase_end(spec) - start
    fail_on_errors(errors)
    check_watermarks(spec, expected_per_partition(n, parts), warnings)
    return {"msgs_per_s": n / elapsed, "mb_per_s": n * size / elapsed / 1e6, "seconds": elapsed}


def consume(spec: dict, warnings: list[str]) -> dict:
    """Read back what ``produce`` wrote, from the beginning of every partition."""
    n, size, parts, topic = spec["count"], spec["size"], spec["partitions"], spec["topic"]
    expected = expected_per_partition(n, parts)
    # librdkafka's default fetch.queue.backoff.ms (1000) stops fetching for a
    # second whenever the application is 100,000 messages behind: a client
    # artefact that capped every server near 200k msg/s, whatever its speed
    c = consumer(spec, **{"enable.partition.eof": False, "fetch.queue.backoff.ms": 10})
    # with the topic's metadata loaded, assign() starts fetching at once instead
    # of waiting for librdkafka's 500 ms leader-query timer
    c.list_topics(topic, timeout=10)
    deadline = time.monotonic() + spec["timeout_s"]
    got = nbytes = 0
    errors = []
    first = None
    start = phase_start(spec)
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(parts)])
    while got < n and time.monotonic() < deadline:
        batch = c.consume(BATCH, 1.0)
        if not batch:
            continue
        if first is None:
            first = time.perf_counter()
        errors += [str(m.error()) for m in batch if m.error() is not None]
        got += len(batch)
        nbytes += sum(map(len, batch))
    end = phase_end(spec)
    positions = [tp.offset for tp in c.position([TopicPartition(topic, p) for p in range(parts)])]
    c.close()
    fail_on_errors(errors)
    if got != n or nbytes != n * size:
        raise Invalid(f"consumed {got} messages / {nbytes} bytes, expected {n} / {n * size}")
    if positions != expected:
        raise Invalid(f"consumer positions {positions[:4]}... are not the message counts {expected[:4]}...")
    check_watermarks(spec, expected, warnings)
    steady = end - first
    return {"msgs_per_s": n / steady, "mb_per_s": n * size / steady / 1e6,
            "ttfm_ms": (first - start) * 1000, "seconds": end - start}


def percentile(sorted_values: list[float], q: float) -> float | None:
    """Nearest-rank percentile of an ascending list; None when there are too few values to tell it."""
    if len(sorted_values) * (1 - q) < 1:
        return None
    return sorted_values[max(0, math.ceil(q * len(sorted_values)) - 1)]


def latency(spec: dict, warnings: list[str]) -> dict:
    """One message at a time: produce (acks=all), then wait until the consumer has it.

    Stops after ``count`` measured messages or ``budget_s`` seconds, whichever
    comes first; a percentile that the samples cannot resolve is None.
    """
    n, warmup, size, topic = spec["count"], spec["warmup"], spec["size"], spec["topic"]
    ensure_topic(spec, 1)
    errors: list[str] = []
    nodelay = {"socket.nagle.disable": True, "error_cb": lambda e: errors.append(str(e))}
    p = Producer(client_config(spec, **{"acks": "all", "linger.ms": 0, **nodelay}))
    c = consumer(spec, **nodelay)
    c.assign([TopicPartition(topic, 0, 0)])
    pad = payloads(size, 1)[0]
    samples = []
    phase_start(spec)
    stop_at = time.monotonic() + spec["budget_s"]
    sent = 0
    while sent < warmup + n and (sent < warmup or time.monotonic() < stop_at):
        value = b"%010d" % sent + pad[10:]
        start = time.perf_counter()
        p.produce(topic, value, partition=0)
        p.poll(0)
        msg = c.poll(spec["timeout_s"])
        elapsed = time.perf_counter() - start
        if msg is None:
            raise Invalid(f"message {sent} not consumed within {spec['timeout_s']} s")
        if msg.error() is not None or msg.value() != value or msg.offset() != sent:
            raise Invalid(f"message {sent}: got offset {msg.offset()}, error {msg.error()}")
        if sent >= warmup:
            samples.append(elapsed * 1000)
        sent += 1
    phase_end(spec)
    flush(p, 30)
    c.close()
    fail_on_errors(errors)
    if not samples:
        raise Invalid(f"the {warmup} warm-up messages took the whole {spec['budget_s']} s budget")
    check_watermarks(spec, [sent], warnings)
    samples.sort()
    return {"p50_ms": percentile(samples, 0.5), "p99_ms": percentile(samples, 0.99),
            "p999_ms": percentile(samples, 0.999), "max_ms": samples[-1], "samples": len(samples),
            "messages": sent}


def _produce_requests(stats: dict) -> int:
    return sum(b.get("req", {}).get("Produce", 0) for b in stats.get("brokers", {}).values())


def small_requests(spec: dict, warnings: list[str]) -> dict:
    """Several producers, each sending single-message Produce requests (at most 5 in flight)."""
    k, per, size, topic = spec["producers"], spec["count_per_producer"], spec["size"], spec["topic"]
    ensure_topic(spec, 1)
    errors: list[str] = []
    stats: list[dict] = [{} for _ in range(k)]

    def keep(i: int) -> Callable[[str], None]:
        return lambda text: stats.__setitem__(i, json.loads(text))

    producers = [Producer(client_config(spec, **{
        "acks": "all", "linger.ms": 0, "batch.num.messages": 1, "max.in.flight.requests.per.connection": 5,
        "statistics.interval.ms": 200, "stats_cb": keep(i), "error_cb": lambda e: errors.append(str(e))}))
        for i in range(k)]
    value = payloads(size, 1)[0]
    start = phase_start(spec)
    for _ in range(per):
        for p in producers:
            send(p, topic, value, 0)
    for p in producers:
        flush(p, spec["timeout_s"])
    elapsed = phase_end(spec) - start
    time.sleep(0.5)  # let every producer emit statistics that include its last requests
    for p in producers:
        p.poll(0.1)
    fail_on_errors(errors)
    total = k * per
    check_watermarks(spec, [total], warnings)
    requests = sum(map(_produce_requests, stats))
    if requests != total:
        raise Invalid(f"{requests} Produce requests for {total} messages: not one message per request")
    return {"requests_per_s": total / elapsed, "seconds": elapsed}


# The follow rows' paced producer lingers a second. With linger.ms=5 every record at 10 a second a
# partition travels in a batch of its own: 20,000 batches a second for 2,000 partitions, which alone
# fill the broker's one core (20-45 us a batch) and leave no consumer cost to measure. A second's linger
# sends one batch of about 10 records a partition a second.
FOLLOW_LINGER_MS = 1000


def follow(spec: dict, warnings: list[str]) -> dict:
    """A consumer of ``partitions`` partitions while ``rate`` messages a second go to each, for ``seconds``.

    librdkafka never opens a fetch session (KIP-227), so the consumer here is a plain fetch loop on
    the project's codec, the same either way: ``consumer`` "sessions" sends a full fetch once and then
    incremental ones naming only the partitions whose position moved, "sessionless" sends full fetches
    (epoch -1), "none" leaves the producer alone (what the broker spends on the producer, to take off
    the others). Fetches wait as librdkafka's do (500 ms, min 1 byte). The producer (confluent-kafka,
    ``FOLLOW_LINGER_MS``) runs in a thread; ``consumer_cpu_per_s`` is the fetch loop's own CPU. Afterwards
    every record is read back (for "none" too).
    """
    parts, rate, seconds, topic = spec["partitions"], spec["rate"], spec["seconds"], spec["topic"]
    ensure_topic(spec, parts)
    errors: list[str] = []
    # a first record in every partition, read before the clock starts: every partition is ready
    # to take records and the session (if any) has been opened
    warmup = Producer(client_config(spec, **{"acks": 1, "linger.ms": 5, "error_cb": lambda e: errors.append(str(e))}))
    for p in range(parts):
        send(warmup, topic, b"first", p)
    flush(warmup, 60)
    produced = [1] * parts
    fetcher = SessionFetcher(spec["bootstrap"], topic, parts, spec["consumer"] == "sessions")
    drain(fetcher, produced)
    stop = threading.Event()

    def produce_paced() -> None:
        p = Producer(client_config(spec, **{"acks": 1, "linger.ms": FOLLOW_LINGER_MS,
                                            "error_cb": lambda e: errors.append(str(e))}))
        value, i, per_tick, started = payloads(100)[0], 0, parts * rate // 100, time.monotonic()
        tick = 0
        while not stop.is_set():
            for _ in range(per_tick):
                send(p, topic, value, i % parts)
                produced[i % parts] += 1
                i += 1
            p.poll(0)
            tick += 1
            time.sleep(max(0.0, started + tick / 100 - time.monotonic()))
        flush(p, 30)

    producer = threading.Thread(target=produce_paced, daemon=True)
    start = phase_start(spec)
    cpu = time.thread_time()
    producer.start()
    consumed = fetches = 0
    if spec["consumer"] == "none":
        time.sleep(seconds)
    while time.perf_counter() - start < seconds:
        consumed += fetcher.fetch()
        fetches += 1
    consumer_cpu = time.thread_time() - cpu
    elapsed = phase_end(spec) - start
    stop.set()
    producer.join(60)
    fail_on_errors(errors)
    consumed += drain(fetcher, produced)
    sent = sum(produced) - parts
    if consumed != sent:
        raise Invalid(f"consumed {consumed} of {sent} messages")
    return {"msgs_per_s": sent / elapsed, "fetches_per_s": fetches / elapsed, "fetches": fetches,
            "consumer_cpu_per_s": consumer_cpu / elapsed, "messages": sent, "seconds": elapsed}


def idle_fetch(spec: dict, warnings: list[str]) -> dict:
    """``fetches`` Fetches of all ``partitions`` partitions of a topic with nothing new in it (max_wait_ms
    0): what a fetch costs the broker when none of its partitions has news, in a session or without."""
    parts, topic = spec["partitions"], spec["topic"]
    ensure_topic(spec, parts)
    p = Producer(client_config(spec, **{"acks": 1, "linger.ms": 5}))
    for partition in range(parts):
        send(p, topic, b"first", partition)
    flush(p, 60)
    fetcher = SessionFetcher(spec["bootstrap"], topic, parts, spec["consumer"] == "sessions")
    drain(fetcher, [1] * parts)
    fetcher.max_wait_ms = 0
    start = phase_start(spec)
    cpu = time.thread_time()
    got = sum(fetcher.fetch() for _ in range(spec["fetches"]))
    client_cpu = time.thread_time() - cpu
    elapsed = phase_end(spec) - start
    if got:
        raise Invalid(f"{got} records came from partitions that had nothing new")
    return {"fetches": spec["fetches"], "client_ms_per_fetch": client_cpu / spec["fetches"] * 1000,
            "seconds": elapsed}


def drain(fetcher: "SessionFetcher", produced: list[int]) -> int:
    """Fetch until every position reaches what was produced; the records that took."""
    got, deadline = 0, time.monotonic() + 60
    while fetcher.offsets != produced:
        if time.monotonic() > deadline:
            raise Invalid(f"positions reached {sum(fetcher.offsets)} of {sum(produced)} messages")
        got += fetcher.fetch()
    return got


class SessionFetcher:
    """Fetch requests for every partition of a topic, in a fetch session or sessionless."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, sessions: bool) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)))
        self.topic, self.sessions = topic, sessions
        self.offsets = [0] * partitions
        self.moved = set(range(partitions))  # to name in the next incremental fetch
        self.session_id, self.epoch = 0, 0 if sessions else -1
        self.correlation_id = 0
        self.max_wait_ms = 500

    def fetch(self) -> int:
        """One Fetch; the number of records it brought."""
        named = self.moved if self.session_id else range(len(self.offsets))
        self.correlation_id += 1
        self.sock.sendall(frames.encode_request("Fetch", 12, self.correlation_id, "bench", {
            "replica_id": -1, "max_wait_ms": self.max_wait_ms, "min_bytes": 1, "max_bytes": 52428800, "isolation_level": 0,
            "session_id": self.session_id, "session_epoch": self.epoch, "forgotten_topics_data": [], "rack_id": "",
            "topics": [{"topic": self.topic, "partitions": [
                {"partition": p, "current_leader_epoch": -1, "fetch_offset": self.offsets[p], "last_fetched_epoch": -1,
                 "log_start_offset": -1, "partition_max_bytes": 1048576} for p in sorted(named)]}]}))
        _, response = frames.decode_response("Fetch", 12, read_frame(self.sock))
        if response["error_code"]:
            raise Invalid(f"Fetch error {response['error_code']} in session {self.session_id} epoch {self.epoch}")
        if self.sessions:
            self.session_id = response["session_id"]
            self.epoch = self.epoch + 1 if self.session_id else 0
        self.moved = set()
        got = 0
        for topic in response["responses"]:
            for part in topic["partitions"]:
                if part["error_code"]:
                    raise Invalid(f"Fetch error {part['error_code']} on partition {part['partition_index']}")
                records, index, position = part["records"] or b"", part["partition_index"], 0
                while position < len(records):
                    header = read_header(records, position)
                    if header.next_offset > self.offsets[index]:
                        got += header.next_offset - max(header.base_offset, self.offsets[index])
                        self.offsets[index] = header.next_offset
                        self.moved.add(index)
                    position += header.size
        return got


def transactions(spec: dict, warnings: list[str]) -> dict:
    """``transactions`` committed transactions of ``per_transaction`` messages each, one partition."""
    txs, per, size, topic = spec["transactions"], spec["per_transaction"], spec["size"], spec["topic"]
    ensure_topic(spec, 1)
    p = Producer(client_config(spec, **{"transactional.id": f"bench-{topic}", "linger.ms": 5}))
    p.init_transactions(30)
    values = payloads(size)
    start = phase_start(spec)
    for _ in range(txs):
        p.begin_transaction()
        for i in range(per):
            send(p, topic, values[i % POOL], 0)
        p.commit_transaction(60)
    elapsed = phase_end(spec) - start
    total = txs * per
    read = count_committed(spec, total)
    if read != total:
        raise Invalid(f"read {read} committed messages, expected {total}")
    return {"tx_per_s": txs / elapsed, "msgs_per_s": total / elapsed, "seconds": elapsed}


def count_committed(spec: dict, expected: int) -> int:
    """Messages a read_committed consumer sees, reading a little past ``expected`` to catch extras."""
    c = consumer(spec, **{"isolation.level": "read_committed"})
    c.assign([TopicPartition(spec["topic"], 0, OFFSET_BEGINNING)])
    got = 0
    deadline = time.monotonic() + spec["timeout_s"]
    while got < expected and time.monotonic() < deadline:
        got += sum(1 for m in c.consume(BATCH, 1.0) if m.error() is None)
    got += sum(1 for m in c.consume(BATCH, 0.5) if m.error() is None)
    c.close()
    return got


WORKLOADS = {f.__name__.replace("_", "-"): f for f in (produce, consume, latency, small_requests, transactions, follow,
                                                          idle_fetch)}


def run(spec: dict) -> dict:
    warnings: list[str] = []
    try:
        metrics = WORKLOADS[spec["kind"]](spec, warnings)
    except (Invalid, KafkaException) as exc:
        return {"valid": False, "reason": str(exc), "metrics": {}, "warnings": warnings}
    return {"valid": True, "reason": None, "metrics": metrics, "warnings": warnings}


if __name__ == "__main__":
    print(json.dumps(run(json.loads(sys.argv[1]))))
