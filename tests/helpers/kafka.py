"""Thin wrappers around confluent-kafka used by several integration tests.

Everything here has a deadline: a broker that stops answering makes a test
fail with a message, never hang.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from dataclasses import dataclass, field

from confluent_kafka import OFFSET_BEGINNING, TIMESTAMP_CREATE_TIME, Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

# Settings that keep librdkafka's failures bounded and its noise down.
COMMON = {
    "broker.address.family": "v4",
    "socket.timeout.ms": 20000,
    "log.connection.close": False,
}


@dataclass(frozen=True)
class Msg:
    """One message as produced: what a consumer must give back byte for byte."""

    seq: int
    partition: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] | None
    timestamp: int


def make_messages(n: int, partitions: int, *, seed: int = 1, base_ts: int | None = None, edge_cases: bool = True) -> list[Msg]:
    """Deterministic, distinct messages spread round-robin over ``partitions``.

    Values carry the sequence number plus a variable-length payload that is
    partly random (incompressible) and partly repetitive (compressible); a few
    messages have a null key, a null value, an empty value or headers, so
    round trips exercise those encodings too (``edge_cases=False``: every
    message has a distinct key and a value).
    """
    rng = random.Random(seed)
    if base_ts is None:
        base_ts = int(time.time() * 1000) - 3_600_000
    out = []
    for seq in range(n):
        key: bytes | None = b"key-%d-%08d" % (seed, seq)
        tail_len = rng.randrange(0, 120)
        value: bytes | None = (
            b"seq=%010d|" % seq + rng.randbytes(rng.randrange(0, 60)) + (b"payload-%d " % (seq % 97)) * (tail_len // 12)
        )
        headers = None
        if edge_cases:
            if seq % 7919 == 13:
                key = None
            if seq % 10007 == 5:
                value = None
            elif seq % 10009 == 6:
                value = b""
            if seq % 997 == 3:
                headers = (("seq", b"%d" % seq), ("empty", b""), ("bin", bytes([seq % 256, 0, 255])))
        out.append(Msg(seq, seq % partitions, key, value, headers, base_ts + seq))
    return out


@dataclass
class Delivery:
    """Outcome of one produce() as told by its delivery report."""

    error: KafkaError | None = None
    partition: int = -1
    offset: int = -1
    done: bool = False


@dataclass
class ProduceResult:
    deliveries: list[Delivery]
    client_errors: list[str] = field(default_factory=list)

    @property
    def acked(self) -> list[int]:
        return [i for i, d in enumerate(self.deliveries) if d.done and d.error is None]

    @property
    def failed(self) -> list[int]:
        return [i for i, d in enumerate(self.deliveries) if not (d.done and d.error is None)]

    def first_errors(self, k: int = 5) -> list[str]:
        errs = [f"#{i}: {d.error}" if d.done else f"#{i}: no delivery report" for i, d in enumerate(self.deliveries) if not (d.done and d.error is None)]
        return errs[:k]


def producer(bootstrap: str, **config) -> tuple[Producer, list[str]]:
    errors: list[str] = []
    conf = {
        **COMMON,
        "bootstrap.servers": bootstrap,
        "acks": "all",
        "linger.ms": 5,
        "message.timeout.ms": 60000,
        "error_cb": lambda e: errors.append(str(e)),
    }
    conf.update({k.replace("_", "."): v for k, v in config.items()})
    return Producer(conf), errors


def produce(p: Producer, topic: str, msgs: list[Msg], result: ProduceResult | None = None, *, explicit_partition: bool = True) -> ProduceResult:
    """Queue ``msgs`` (not flushed); delivery reports land in the returned result."""
    if result is None:
        result = ProduceResult([])
    base = len(result.deliveries)
    result.deliveries.extend(Delivery() for _ in msgs)

    def make_cb(i: int):
        def cb(err, m):
            d = result.deliveries[i]
            d.done = True
            d.error = err
            if err is None:
                d.partition = m.partition()
                d.offset = m.offset()

        return cb

    for j, m in enumerate(msgs):
        kwargs = dict(key=m.key, value=m.value, timestamp=m.timestamp, on_delivery=make_cb(base + j))
        if explicit_partition:
            kwargs["partition"] = m.partition
        if m.headers is not None:
            kwargs["headers"] = list(m.headers)
        while True:
            try:
                p.produce(topic, **kwargs)
                break
            except BufferError:
                p.poll(0.05)
        if j % 1000 == 0:
            p.poll(0)
    return result


def flush(p: Producer, timeout: float = 60.0) -> None:
    remaining = p.flush(timeout)
    assert remaining == 0, f"producer flush left {remaining} messages undelivered after {timeout}s"


def produce_all(bootstrap: str, topic: str, msgs: list[Msg], **config) -> ProduceResult:
    """Produce and flush; asserts every message got a successful delivery report."""
    p, errors = producer(bootstrap, **config)
    res = produce(p, topic, msgs)
    flush(p)
    res.client_errors = errors
    assert not res.failed, (
        f"{len(res.failed)} of {len(msgs)} messages not acknowledged: {res.first_errors()}; client errors: {errors[:5]}"
    )
    return res


# -- consuming ----------------------------------------------------------------

Got = tuple  # (offset, key, value, headers, (ts_type, ts))


def consumer(bootstrap: str, **config) -> tuple[Consumer, list[str]]:
    errors: list[str] = []
    conf = {
        **COMMON,
        "bootstrap.servers": bootstrap,
        "group.id": "moldau-it-reader",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "error",
        "error_cb": lambda e: errors.append(str(e)),
    }
    conf.update({k.replace("_", "."): v for k, v in config.items()})
    return Consumer(conf), errors


def watermarks(c: Consumer, topic: str, partition: int, timeout: float = 10.0) -> tuple[int, int]:
    return c.get_watermark_offsets(TopicPartition(topic, partition), timeout=timeout, cached=False)


def consume_until(
    c: Consumer, topic: str, end_offsets: dict[int, int], *, timeout: float = 60.0, errors: list[str] | None = None
) -> dict[int, list[Got]]:
    """Read already-assigned partitions until each reaches its end offset.

    Returns, per partition, every message seen as (offset, key, value,
    headers, timestamp). Fails on a consumer error or at the deadline.
    A partition is done once the consumer's position reaches its end: the
    record before the end may be a transaction marker (markers are written
    after EndTxn is answered, so another producer's records can precede
    one), which the client skips without handing it over.
    """
    got: dict[int, list[Got]] = {p: [] for p in end_offsets}
    pending = {p for p, end in end_offsets.items() if end > 0}
    deadline = time.monotonic() + timeout
    while pending:
        if time.monotonic() > deadline:
            progress = {p: (got[p][-1][0] + 1 if got[p] else 0, end_offsets[p]) for p in end_offsets}
            raise AssertionError(
                f"timed out after {timeout}s reading {topic}: (next offset, end) per partition {progress}; "
                f"client errors: {(errors or [])[:5]}"
            )
        for m in c.consume(num_messages=5000, timeout=0.5):
            err = m.error()
            if err is not None:
                raise AssertionError(f"consumer error on {m.topic()}[{m.partition()}]: {err}")
            assert m.topic() == topic, f"message from unexpected topic {m.topic()!r}"
            p = m.partition()
            assert p in got, f"message from unassigned partition {p}"
            got[p].append((m.offset(), m.key(), m.value(), _headers(m.headers()), m.timestamp()))
        if pending:
            pending -= {tp.partition for tp in c.position([TopicPartition(topic, p) for p in pending])
                        if tp.offset >= end_offsets[tp.partition]}
    return got


def _headers(h):
    if h is None:
        return None
    return tuple((k, v) for k, v in h)


def read_partitions(bootstrap: str, topic: str, partitions: list[int], *, timeout: float = 60.0, **config):
    """Assign ``partitions`` from the beginning and read up to the high watermark.

    Returns (messages per partition, (low, high) per partition).
    """
    c, errors = consumer(bootstrap, **config)
    try:
        marks = {p: watermarks(c, topic, p) for p in partitions}
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        got = consume_until(c, topic, {p: marks[p][1] for p in partitions}, timeout=timeout, errors=errors)
        return got, marks
    finally:
        c.close()


def read_from(bootstrap: str, topic: str, partition: int, start: int, end: int, *, timeout: float = 60.0, **config) -> list[Got]:
    """Assign one partition at offset ``start`` and read up to ``end``."""
    c, errors = consumer(bootstrap, **config)
    try:
        c.assign([TopicPartition(topic, partition, start)])
        return consume_until(c, topic, {partition: end}, timeout=timeout, errors=errors)[partition]
    finally:
        c.close()


# -- admin --------------------------------------------------------------------


def admin(bootstrap: str, **config) -> AdminClient:
    conf = {**COMMON, "bootstrap.servers": bootstrap}
    conf.update({k.replace("_", "."): v for k, v in config.items()})
    return AdminClient(conf)


def topic_partitions(a: AdminClient, topic: str, timeout: float = 10.0) -> dict | None:
    """Partition metadata of ``topic`` from an all-topics request (never auto-creates), or None."""
    md = a.list_topics(timeout=timeout)
    t = md.topics.get(topic)
    if t is None or t.error is not None and t.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
        return None
    return t.partitions


def wait_topic(a: AdminClient, topic: str, partitions: int, timeout: float = 20.0) -> None:
    """Wait until metadata shows ``topic`` with ``partitions`` partitions, each with a leader."""
    deadline = time.monotonic() + timeout
    last = None
    while True:
        md = a.list_topics(timeout=10)
        t = md.topics.get(topic)
        if t is not None:
            last = (t.error, {p: pm.leader for p, pm in t.partitions.items()})
            if t.error is None and len(t.partitions) == partitions and all(pm.leader >= 0 for pm in t.partitions.values()):
                return
        if time.monotonic() > deadline:
            raise AssertionError(f"topic {topic!r} not ready with {partitions} partitions after {timeout}s; last seen: {last}")
        time.sleep(0.2)


def create_topic(bootstrap: str, topic: str, partitions: int = 1, timeout: float = 30.0) -> None:
    a = admin(bootstrap)
    futs = a.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)], operation_timeout=timeout)
    try:
        futs[topic].result(timeout)
    except KafkaException as exc:
        raise AssertionError(f"CreateTopics {topic!r} ({partitions} partitions) failed: {exc}") from None
    wait_topic(a, topic, partitions, timeout)


def produce_one(p: Producer, topic: str, partition: int, key: bytes, value: bytes, timeout: float = 30.0) -> int:
    """Produce one message, wait for its delivery report, return its offset."""
    res = produce(p, topic, [Msg(0, partition, key, value, None, int(time.time() * 1000))])
    flush(p, timeout)
    d = res.deliveries[0]
    assert d.done and d.error is None, f"produce to {topic}[{partition}] failed: {d.error}"
    return d.offset


# -- checking -------------------------------------------------------------------


def index_by_offset(msgs: list[Msg], res: "ProduceResult | list[Delivery]") -> dict[tuple[int, int], Msg]:
    """(partition, offset) -> message, from the delivery reports; checks offsets are unique and dense."""
    deliveries = res.deliveries if isinstance(res, ProduceResult) else res
    assert len(deliveries) == len(msgs)
    by_offset: dict[tuple[int, int], Msg] = {}
    for m, d in zip(msgs, deliveries, strict=False):
        assert d.partition == m.partition, f"message {m.seq} sent to partition {m.partition} but acked on {d.partition}"
        k = (d.partition, d.offset)
        assert k not in by_offset, f"offset {k} acknowledged twice (messages {by_offset.get(k).seq} and {m.seq})"
        by_offset[k] = m
    counts = Counter(m.partition for m in msgs)
    for p, n in counts.items():
        offs = sorted(o for (pp, o) in by_offset if pp == p)
        assert offs == list(range(n)), f"partition {p}: acknowledged offsets are not 0..{n - 1} (first: {offs[:5]}, last: {offs[-5:]})"
    return by_offset


def compare(topic: str, got: dict[int, list], by_offset: dict[tuple[int, int], Msg], counts: Counter) -> None:
    """Every partition holds exactly its messages, at offsets 0..n-1, identical to what was sent."""
    for p, n in counts.items():
        offsets = [g[0] for g in got[p]]
        assert offsets == list(range(n)), (
            f"{topic}[{p}]: consumed offsets not contiguous 0..{n - 1}: got {len(offsets)} messages, "
            f"first {offsets[:5]}, last {offsets[-5:]}"
        )
        bad = []
        for off, key, value, headers, ts in got[p]:
            m = by_offset[(p, off)]
            want = (m.key, m.value, m.headers, (TIMESTAMP_CREATE_TIME, m.timestamp))
            have = (key, value, headers, ts)
            if want != have:
                bad.append((off, want, have))
        assert not bad, f"{topic}[{p}]: {len(bad)} messages differ from what was sent; first: {bad[:3]}"
