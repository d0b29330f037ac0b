"""Real Kafka clients against a real Moldau broker process.

confluent-kafka (librdkafka), kafka-python, aiokafka and kcat each do a round
trip; AdminClient manages topics; ListOffsets is checked through watermarks
and offsets_for_times. Every check compares what a client got back with what
was sent, byte for byte, at the offset the broker acknowledged.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import time
from collections import Counter

import pytest
from confluent_kafka import OFFSET_BEGINNING, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import NewPartitions, NewTopic

from helpers.kafka import (
    admin,
    compare,
    consume_until,
    consumer,
    create_topic,
    flush,
    index_by_offset,
    make_messages,
    produce,
    produce_all,
    produce_one,
    producer,
    read_partitions,
    topic_partitions,
    wait_topic,
    watermarks,
)

N_MESSAGES = 100_000


# ---------------------------------------------------------------------------
# confluent-kafka
# ---------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(150)
@pytest.mark.parametrize("compression", ["none", "lz4", "zstd"])
def test_confluent_100k_roundtrip(start_broker, compression):
    b = start_broker()
    topic = f"bulk-{compression}"
    create_topic(b.bootstrap, topic, partitions=3)
    msgs = make_messages(N_MESSAGES, 3, seed=11)
    counts = Counter(m.partition for m in msgs)

    t0 = time.monotonic()
    res = produce_all(b.bootstrap, topic, msgs, compression_type=compression)
    t_produce = time.monotonic() - t0
    by_offset = index_by_offset(msgs, res)

    t0 = time.monotonic()
    got, marks = read_partitions(b.bootstrap, topic, [0, 1, 2], timeout=90)
    t_consume = time.monotonic() - t0
    for p in range(3):
        assert marks[p] == (0, counts[p]), f"{topic}[{p}] watermarks {marks[p]}, expected (0, {counts[p]})"
    compare(topic, got, by_offset, counts)
    print(f"{compression}: produced {N_MESSAGES} in {t_produce:.1f}s, consumed in {t_consume:.1f}s")


def test_confluent_default_partitioner_and_null_fields(broker):
    """Keyed messages without an explicit partition land by key hash; null key/value and headers survive."""
    topic = "keyed"
    create_topic(broker.bootstrap, topic, partitions=4)
    p, errors = producer(broker.bootstrap)
    sent = {}
    acks: list = []
    for i in range(400):
        key = b"user-%d" % (i % 37)
        value = None if i % 50 == 0 else b"v%d" % i
        p.produce(topic, key=key, value=value, headers=[("i", b"%d" % i)], on_delivery=lambda e, m: acks.append((e, m.partition(), m.offset(), m.key(), m.value())))
    p.produce(topic, key=None, value=b"no key", partition=2, on_delivery=lambda e, m: acks.append((e, m.partition(), m.offset(), m.key(), m.value())))
    assert p.flush(30) == 0, f"flush incomplete; client errors {errors[:5]}"
    assert len(acks) == 401 and all(a[0] is None for a in acks), [a for a in acks if a[0] is not None][:5]
    key_partition = {}
    for _, part, off, key, value in acks:
        if key is not None:
            assert key_partition.setdefault(key, part) == part, f"key {key!r} went to two partitions"
        sent[(part, off)] = (key, value)
    got, marks = read_partitions(broker.bootstrap, topic, [0, 1, 2, 3])
    seen = {}
    for part, rows in got.items():
        assert marks[part][1] == sum(1 for (pp, _) in sent if pp == part)
        for off, key, value, _headers, _ts in rows:
            seen[(part, off)] = (key, value)
    assert seen == sent


@pytest.mark.timeout(60)
@pytest.mark.parametrize("compression", ["none", "lz4"])
def test_confluent_fetch_from_the_middle_of_a_batch(broker, compression):
    """A consumer starting mid-batch gets exactly the messages from its offset on."""
    topic = f"mid-{compression}"
    create_topic(broker.bootstrap, topic, partitions=1)
    msgs = make_messages(1000, 1, seed=12)
    res = produce_all(broker.bootstrap, topic, msgs, compression_type=compression, linger_ms=100)
    by_offset = index_by_offset(msgs, res)
    for start in (1, 377, 999):
        c, errors = consumer(broker.bootstrap)
        try:
            c.assign([TopicPartition(topic, 0, start)])
            got = consume_until(c, topic, {0: 1000}, timeout=30, errors=errors)[0]
        finally:
            c.close()
        assert [g[0] for g in got] == list(range(start, 1000)), f"from {start}: offsets {[g[0] for g in got][:5]}..."
        assert all(g[2] == by_offset[(0, g[0])].value for g in got)


@pytest.mark.timeout(60)
def test_confluent_large_messages(broker):
    topic = "large"
    create_topic(broker.bootstrap, topic, partitions=1)
    sizes = [900_000, 1, 500_000, 0, 700_000]
    values = [bytes([i + 1]) * n for i, n in enumerate(sizes)]
    p, errors = producer(broker.bootstrap)
    offsets = [produce_one(p, topic, 0, b"big-%d" % i, v) for i, v in enumerate(values)]
    assert offsets == list(range(len(values)))
    got, marks = read_partitions(broker.bootstrap, topic, [0])
    assert marks[0] == (0, len(values))
    assert [(g[1], g[2]) for g in got[0]] == [(b"big-%d" % i, v) for i, v in enumerate(values)]


@pytest.mark.timeout(90)
def test_confluent_concurrent_producers_share_partitions(broker):
    """Appends from several connections at once get distinct, gap-free offsets."""
    import threading

    topic = "shared"
    create_topic(broker.bootstrap, topic, partitions=2)
    per = [make_messages(8000, 2, seed=100 + t) for t in range(4)]
    results: list = [None] * 4
    failures: list = []

    def run(t: int) -> None:
        try:
            results[t] = produce_all(broker.bootstrap, topic, per[t], linger_ms=1, batch_num_messages=200)
        except BaseException as exc:  # noqa: BLE001 - reported below
            failures.append((t, exc))

    threads = [threading.Thread(target=run, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
    assert not failures, failures
    msgs = [m for t in range(4) for m in per[t]]
    deliveries = [d for t in range(4) for d in results[t].deliveries]
    by_offset = index_by_offset(msgs, deliveries)
    counts = Counter(m.partition for m in msgs)
    got, marks = read_partitions(broker.bootstrap, topic, [0, 1])
    assert {p: marks[p] for p in (0, 1)} == {p: (0, counts[p]) for p in (0, 1)}
    compare(topic, got, by_offset, counts)


@pytest.mark.timeout(60)
def test_confluent_consumer_tails_a_live_producer(broker):
    """A consumer waiting at the end of the log sees messages as they arrive (long-poll fetch)."""
    topic = "tail"
    create_topic(broker.bootstrap, topic, partitions=1)
    c, errors = consumer(broker.bootstrap, fetch_wait_max_ms=200)
    p, _ = producer(broker.bootstrap, linger_ms=1)
    msgs = make_messages(5000, 1, seed=13)
    got = []
    try:
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        assert c.consume(10, 1.0) == [], "messages in an empty topic"
        res = None
        for i in range(0, len(msgs), 250):
            res = produce(p, topic, msgs[i : i + 250], res)
            p.poll(0)
            for m in c.consume(1000, 0.05):
                assert m.error() is None, m.error()
                got.append((m.offset(), m.value()))
        flush(p)
        deadline = time.monotonic() + 30
        while len(got) < len(msgs):
            assert time.monotonic() < deadline, f"tailing consumer got {len(got)} of {len(msgs)}; errors {errors[:5]}"
            for m in c.consume(1000, 0.5):
                assert m.error() is None, m.error()
                got.append((m.offset(), m.value()))
    finally:
        c.close()
    assert not res.failed
    by_offset = index_by_offset(msgs, res)
    assert [g[0] for g in got] == list(range(len(msgs)))
    assert all(v == by_offset[(0, o)].value for o, v in got)


@pytest.mark.timeout(60)
def test_confluent_acks_0_and_1(broker):
    """acks=0 gets no response (the connection must stay usable); acks=1 works like acks=all here."""
    topic = "acks"
    create_topic(broker.bootstrap, topic, partitions=1)
    zero = make_messages(2000, 1, seed=14)
    one = make_messages(2000, 1, seed=15)
    p0, errors0 = producer(broker.bootstrap, acks=0, linger_ms=2, batch_num_messages=100)
    res0 = produce(p0, topic, zero)
    flush(p0)
    assert not res0.failed, res0.first_errors()
    p1, errors1 = producer(broker.bootstrap, acks=1)
    res1 = produce(p1, topic, one)
    flush(p1)
    assert not res1.failed, res1.first_errors()
    assert sorted(d.offset for d in res1.deliveries) == list(range(2000, 4000)), "acks=1 offsets follow the acks=0 ones"
    got, marks = read_partitions(broker.bootstrap, topic, [0])
    assert marks[0] == (0, 4000)
    assert [g[1] for g in got[0][:2000]] == [m.key for m in zero], "acks=0 messages missing or out of order"
    assert [(g[1], g[2]) for g in got[0][2000:]] == [(m.key, m.value) for m in one]
    assert not [e for e in errors0 if "Disconnected" in e or "Receive failed" in e], errors0


@pytest.mark.timeout(60)
def test_auto_create_disabled(start_broker):
    b = start_broker(auto_create_topics_enable="false")
    a = admin(b.bootstrap)
    md = a.list_topics(topic="nope", timeout=10)  # a Metadata request naming the topic
    t = md.topics.get("nope")
    assert t is not None and t.error is not None and t.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART, t
    p, errors = producer(b.bootstrap, message_timeout_ms=5000, topic_metadata_propagation_max_ms=1000)
    res = produce(p, "nope", make_messages(1, 1))
    p.flush(15)
    d = res.deliveries[0]
    assert d.done and d.error is not None, "produce to a missing topic succeeded with auto-create off"
    assert d.error.code() in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC, KafkaError._MSG_TIMED_OUT), d.error
    assert topic_partitions(a, "nope") is None
    assert not b.partition_dir("nope", 0).exists()

    # explicit creation still works
    create_topic(b.bootstrap, "explicit", partitions=2)
    assert produce_one(p, "explicit", 1, b"k", b"v") == 0


@pytest.mark.timeout(60)
def test_auto_create_on_metadata_uses_num_partitions(start_broker):
    b = start_broker(num_partitions=3)
    a = admin(b.bootstrap)
    a.list_topics(topic="made-by-metadata", timeout=10)
    wait_topic(a, "made-by-metadata", 3)
    p, _ = producer(b.bootstrap)
    assert produce_one(p, "made-by-metadata", 2, b"k", b"v") == 0


# ---------------------------------------------------------------------------
# kafka-python
# ---------------------------------------------------------------------------


@pytest.mark.timeout(90)
@pytest.mark.parametrize("idempotent", [False, True], ids=["plain", "idempotent"])
def test_kafka_python_roundtrip(start_broker, idempotent):
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KTP

    b = start_broker(num_partitions=2)  # topic is auto-created by the producer's metadata request
    topic = "kafka-python"
    msgs = make_messages(3000, 2, seed=21)
    prod = KafkaProducer(
        bootstrap_servers=b.bootstrap,
        acks="all",
        enable_idempotence=idempotent,
        linger_ms=5,
        request_timeout_ms=15000,
        max_block_ms=20000,
    )
    try:
        assert prod.partitions_for(topic) == {0, 1}, "auto-created topic should have num.partitions=2 partitions"
        futs = [
            prod.send(
                topic,
                key=m.key,
                value=m.value,
                partition=m.partition,
                timestamp_ms=m.timestamp,
                headers=list(m.headers) if m.headers else None,
            )
            for m in msgs
        ]
        prod.flush(timeout=30)
        metas = [f.get(timeout=30) for f in futs]
    finally:
        prod.close(timeout=10)

    by_offset = {}
    for m, md in zip(msgs, metas, strict=False):
        assert md.partition == m.partition
        assert (md.partition, md.offset) not in by_offset, f"offset {md.partition}/{md.offset} acknowledged twice"
        by_offset[(md.partition, md.offset)] = m
    counts = Counter(m.partition for m in msgs)

    cons = KafkaConsumer(
        bootstrap_servers=b.bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="none",
        request_timeout_ms=15000,
    )
    try:
        tps = [KTP(topic, p) for p in (0, 1)]
        cons.assign(tps)
        cons.seek_to_beginning()
        ends = cons.end_offsets(tps)
        assert {tp.partition: off for tp, off in ends.items()} == dict(counts)
        got = {0: [], 1: []}
        deadline = time.monotonic() + 60
        while any(len(got[p]) < counts[p] for p in got):
            assert time.monotonic() < deadline, f"kafka-python consumer timed out: got {[len(v) for v in got.values()]} of {dict(counts)}"
            for tp, records in cons.poll(timeout_ms=500, max_records=2000).items():
                for r in records:
                    got[tp.partition].append(r)
    finally:
        cons.close()

    for p, n in counts.items():
        assert [r.offset for r in got[p]] == list(range(n)), f"partition {p}: offsets not contiguous"
        for r in got[p]:
            m = by_offset[(p, r.offset)]
            want_headers = list(m.headers) if m.headers else []
            assert (r.key, r.value, list(r.headers or []), r.timestamp, r.timestamp_type) == (
                m.key,
                m.value,
                want_headers,
                m.timestamp,
                0,
            ), f"partition {p} offset {r.offset} differs from message {m.seq}"


# ---------------------------------------------------------------------------
# aiokafka
# ---------------------------------------------------------------------------


@pytest.mark.timeout(90)
@pytest.mark.parametrize("compression", [None, "gzip"], ids=["none", "gzip"])
def test_aiokafka_roundtrip(broker, compression):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.structs import TopicPartition as ATP

    topic = "aiokafka"
    create_topic(broker.bootstrap, topic, partitions=2)
    msgs = make_messages(3000, 2, seed=31)

    async def run():
        prod = AIOKafkaProducer(
            bootstrap_servers=broker.bootstrap, acks="all", compression_type=compression, linger_ms=5, request_timeout_ms=15000
        )
        await prod.start()
        try:
            futs = [
                await prod.send(
                    topic,
                    key=m.key,
                    value=m.value,
                    partition=m.partition,
                    timestamp_ms=m.timestamp,
                    headers=list(m.headers) if m.headers else None,
                )
                for m in msgs
            ]
            await prod.flush()
            metas = [await f for f in futs]
        finally:
            await prod.stop()

        cons = AIOKafkaConsumer(
            bootstrap_servers=broker.bootstrap, group_id=None, enable_auto_commit=False, auto_offset_reset="none",
            request_timeout_ms=15000,
        )
        await cons.start()
        try:
            tps = [ATP(topic, 0), ATP(topic, 1)]
            cons.assign(tps)
            await cons.seek_to_beginning(*tps)
            ends = await cons.end_offsets(tps)
            got = {0: [], 1: []}
            while any(len(got[tp.partition]) < ends[tp] for tp in tps):
                batch = await cons.getmany(*tps, timeout_ms=500, max_records=2000)
                for tp, records in batch.items():
                    got[tp.partition].extend(records)
            return metas, {tp.partition: off for tp, off in ends.items()}, got
        finally:
            await cons.stop()

    metas, ends, got = asyncio.run(asyncio.wait_for(run(), 60))

    counts = Counter(m.partition for m in msgs)
    assert ends == dict(counts)
    by_offset = {}
    for m, md in zip(msgs, metas, strict=False):
        assert md.partition == m.partition
        by_offset[(md.partition, md.offset)] = m
    assert len(by_offset) == len(msgs), "some offsets were acknowledged twice"
    for p, n in counts.items():
        assert [r.offset for r in got[p]] == list(range(n)), f"partition {p}: offsets not contiguous"
        for r in got[p]:
            m = by_offset[(p, r.offset)]
            want_headers = list(m.headers) if m.headers else []
            assert (r.key, r.value, list(r.headers or ()), r.timestamp) == (m.key, m.value, want_headers, m.timestamp), (
                f"partition {p} offset {r.offset} differs from message {m.seq}"
            )


# ---------------------------------------------------------------------------
# kcat
# ---------------------------------------------------------------------------

def kcat(*args: str, input: bytes | None = None, timeout: float = 30) -> str:
    assert shutil.which("kcat"), "kcat is not installed (make test-deps installs it: apt-get install kcat)"
    cmd = ["kcat", "-X", "broker.address.family=v4", *args]
    r = subprocess.run(cmd, input=input, capture_output=True, timeout=timeout)
    assert r.returncode == 0, f"{' '.join(cmd)} exited {r.returncode}\nstdout: {r.stdout[-2000:]!r}\nstderr: {r.stderr[-2000:]!r}"
    return r.stdout.decode()


@pytest.mark.timeout(60)
def test_kcat_metadata_and_roundtrip(broker):
    topic = "kcat-topic"
    create_topic(broker.bootstrap, topic, partitions=3)

    text = kcat("-b", broker.bootstrap, "-L", "-t", topic)
    assert f'topic "{topic}" with 3 partitions' in text, text

    md = json.loads(kcat("-b", broker.bootstrap, "-L", "-J"))
    assert [(br["id"], br["name"]) for br in md["brokers"]] == [(1, broker.bootstrap)], md["brokers"]
    topics = {t["topic"]: t for t in md["topics"]}
    assert topic in topics, f"{topic} missing from kcat -L -J: {list(topics)}"
    parts = sorted(p["partition"] for p in topics[topic]["partitions"])
    assert parts == [0, 1, 2]
    assert all(p["leader"] == 1 for p in topics[topic]["partitions"]), topics[topic]

    lines = [f"k{i}:value number {i}" for i in range(50)]
    kcat("-b", broker.bootstrap, "-P", "-t", topic, "-p", "1", "-K:", input=("\n".join(lines) + "\n").encode())
    out = kcat("-b", broker.bootstrap, "-C", "-t", topic, "-p", "1", "-o", "beginning", "-e", "-f", "%o|%k|%s\n")
    assert out.splitlines() == [f"{i}|k{i}|value number {i}" for i in range(50)]


@pytest.mark.timeout(60)
def test_advertised_listener_and_node_id_in_metadata(start_broker):
    b = start_broker(advertised_listeners="PLAINTEXT://localhost:{port}", node_id=7)
    create_topic(b.bootstrap, "adv", partitions=2)
    md = json.loads(kcat("-b", b.bootstrap, "-L", "-J", "-t", "adv"))
    assert [(br["id"], br["name"]) for br in md["brokers"]] == [(7, f"localhost:{b.port}")], md["brokers"]
    (t,) = md["topics"]
    assert sorted((p["partition"], p["leader"]) for p in t["partitions"]) == [(0, 7), (1, 7)]


# ---------------------------------------------------------------------------
# AdminClient
# ---------------------------------------------------------------------------


@pytest.mark.timeout(90)
def test_admin_create_list_grow_delete(broker):
    a = admin(broker.bootstrap)
    md = a.list_topics(timeout=10)
    assert [(bm.id, bm.host, bm.port) for bm in md.brokers.values()] == [(1, "127.0.0.1", broker.port)]

    futs = a.create_topics(
        [NewTopic("alpha", num_partitions=2, replication_factor=1), NewTopic("beta", num_partitions=1, replication_factor=1)],
        operation_timeout=20,
    )
    for _name, f in futs.items():
        f.result(20)
    wait_topic(a, "alpha", 2)
    wait_topic(a, "beta", 1)
    parts = topic_partitions(a, "alpha")
    assert sorted(parts) == [0, 1]
    assert all(pm.leader == 1 and list(pm.replicas) == [1] and list(pm.isrs) == [1] for pm in parts.values())

    # creating it again is an error, and leaves the topic alone
    with pytest.raises(KafkaException) as ei:
        a.create_topics([NewTopic("alpha", num_partitions=5, replication_factor=1)])["alpha"].result(20)
    assert ei.value.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS, ei.value
    assert len(topic_partitions(a, "alpha")) == 2

    p, _ = producer(broker.bootstrap)
    assert produce_one(p, "beta", 0, b"k", b"kept") == 0

    # grow alpha from 2 to 5 partitions; the new ones are usable
    a.create_partitions([NewPartitions("alpha", 5)], operation_timeout=20)["alpha"].result(20)
    wait_topic(a, "alpha", 5)
    assert produce_one(p, "alpha", 4, b"k4", b"in a new partition") == 0
    got, marks = read_partitions(broker.bootstrap, "alpha", [4])
    assert marks[4] == (0, 1)
    assert [(g[0], g[1], g[2]) for g in got[4]] == [(0, b"k4", b"in a new partition")]

    # shrinking is refused
    with pytest.raises(KafkaException):
        a.create_partitions([NewPartitions("alpha", 3)])["alpha"].result(20)
    assert len(topic_partitions(a, "alpha")) == 5

    # delete alpha; beta and its data stay
    a.delete_topics(["alpha"], operation_timeout=20)["alpha"].result(20)
    deadline = time.monotonic() + 15
    while topic_partitions(a, "alpha") is not None:
        assert time.monotonic() < deadline, "alpha still listed 15s after DeleteTopics succeeded"
        time.sleep(0.2)
    assert topic_partitions(a, "beta") is not None
    got, marks = read_partitions(broker.bootstrap, "beta", [0])
    assert [(g[0], g[2]) for g in got[0]] == [(0, b"kept")]

    # deleting a topic that does not exist is an error
    with pytest.raises(KafkaException) as ei:
        a.delete_topics(["no-such-topic"], operation_timeout=10)["no-such-topic"].result(20)
    assert ei.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART, ei.value


# ---------------------------------------------------------------------------
# ListOffsets
# ---------------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_list_offsets_watermarks_and_times(broker):
    topic = "times"
    create_topic(broker.bootstrap, topic, partitions=1)
    c, _ = consumer(broker.bootstrap)
    try:
        assert watermarks(c, topic, 0) == (0, 0), "empty partition"

        base = int(time.time() * 1000) - 600_000
        p, _ = producer(broker.bootstrap)
        # one batch per message: timestamps 10 ms apart
        for i in range(20):
            p.produce(topic, key=b"%d" % i, value=b"t", partition=0, timestamp=base + 10 * i)
            assert p.flush(15) == 0
        assert watermarks(c, topic, 0) == (0, 20)

        def at(ts: int) -> int:
            (tp,) = c.offsets_for_times([TopicPartition(topic, 0, ts)], timeout=10)
            assert tp.error is None, tp.error
            return tp.offset

        assert at(base - 5000) == 0
        assert at(base) == 0
        assert at(base + 1) == 1
        assert at(base + 70) == 7
        assert at(base + 65) == 7
        assert at(base + 190) == 19
        assert at(base + 191) == -1, "no message at or after the timestamp: offset -1"
        assert at(-2) == 0, "EARLIEST"
        assert at(-1) == 20, "LATEST"
    finally:
        c.close()


@pytest.mark.timeout(60)
def test_offsets_for_times_inside_one_batch(broker):
    """Kafka answers with the first *record* at/after the time, even mid-batch."""
    topic = "times-batch"
    create_topic(broker.bootstrap, topic, partitions=1)
    base = int(time.time() * 1000) - 600_000
    p, _ = producer(broker.bootstrap, linger_ms=200)
    for i in range(10):
        p.produce(topic, value=b"x%d" % i, partition=0, timestamp=base + 10 * i)
    assert p.flush(15) == 0
    c, _ = consumer(broker.bootstrap)
    try:
        assert watermarks(c, topic, 0) == (0, 10)
        res = c.offsets_for_times([TopicPartition(topic, 0, base + 35)], timeout=10)
        assert res[0].error is None and res[0].offset == 4, res[0]
        res = c.offsets_for_times([TopicPartition(topic, 0, base + 90)], timeout=10)
        assert res[0].error is None and res[0].offset == 9, res[0]
    finally:
        c.close()


@pytest.mark.timeout(60)
def test_invalid_topic_names_are_rejected(broker):
    """Kafka's rules: [a-zA-Z0-9._-], 1..249 chars, not '.' or '..'; nothing lands outside log.dirs."""
    a = admin(broker.bootstrap)
    bad = ["../escape", "a/b", "..", ".", "sp ace", "x" * 250, "emoji-\u2603"]
    futs = a.create_topics([NewTopic(n, num_partitions=1, replication_factor=1) for n in bad], operation_timeout=10)
    accepted = []
    for name, f in futs.items():
        try:
            f.result(20)
            accepted.append(name)
        except KafkaException as exc:
            assert exc.args[0].code() == KafkaError.TOPIC_EXCEPTION, f"{name!r}: {exc}"
    assert not accepted, f"invalid topic names accepted: {accepted}"
    assert not (broker.data_dir.parent / "escape-0").exists()
    assert sorted(p.name for p in broker.data_dir.iterdir() if not p.name.startswith((".", "__")) and p.is_dir()) == []
    # the longest legal name works
    create_topic(broker.bootstrap, "y" * 249, partitions=1)


def test_clients_cannot_write_internal_topics(broker):
    """__consumer_offsets and __transaction_state belong to the coordinators: Produce gets INVALID_TOPIC_EXCEPTION."""
    c, _ = consumer(broker.bootstrap)
    for topic in ("__consumer_offsets", "__transaction_state"):
        before = watermarks(c, topic, 0)
        p, _ = producer(broker.bootstrap, retries=0, message_timeout_ms=5000)
        errors = []
        p.produce(topic, value=b"forged", partition=0, on_delivery=lambda err, msg: errors.append(err))
        p.flush(10)
        assert len(errors) == 1 and errors[0] is not None, f"{topic}: forged write was acknowledged"
        assert errors[0].code() == KafkaError.TOPIC_EXCEPTION, f"{topic}: {errors[0]}"
        assert watermarks(c, topic, 0) == before
    c.close()
