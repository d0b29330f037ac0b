"""Durability: what a broker acknowledged survives a crash; a damaged tail is repaired.

The broker is killed with SIGKILL (a crash: no shutdown code runs) or stopped
with SIGTERM, restarted on the same data directory and port, and read back
with confluent-kafka.
"""

from __future__ import annotations

import random
import re
import time
from collections import Counter

import pytest

from helpers.kafka import (
    compare,
    create_topic,
    flush,
    index_by_offset,
    make_messages,
    produce,
    produce_all,
    produce_one,
    producer,
    read_from,
    read_partitions,
)
from protocol.records import HEADER_SIZE, valid_prefix

SEGMENT_NAME = re.compile(r"^\d{20}\.log$")
FIRST_SEGMENT = "0" * 20 + ".log"


def check_segment_names(files) -> None:
    names = [f.name for f in files]
    assert names, "no segment files"
    assert all(SEGMENT_NAME.match(n) for n in names), names
    assert names[0] == FIRST_SEGMENT, names


# ---------------------------------------------------------------------------
# crash after acknowledgement
# ---------------------------------------------------------------------------


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "overrides,n",
    [
        ({"log.segment.bytes": 256 * 1024}, 30_000),
        ({"log.flush.interval.messages": 1, "log.flush.interval.ms": 1000}, 3_000),
    ],
    ids=["small-segments", "flush-every-message"],
)
def test_acked_messages_survive_sigkill(start_broker, overrides, n):
    b = start_broker(overrides)
    topic = "durable"
    create_topic(b.bootstrap, topic, partitions=3)
    msgs = make_messages(n, 3, seed=41)
    counts = Counter(m.partition for m in msgs)
    # batches well below the segment size, so they fit any segment
    res = produce_all(b.bootstrap, topic, msgs, batch_size=32 * 1024)
    by_offset = index_by_offset(msgs, res)
    got, marks = read_partitions(b.bootstrap, topic, [0, 1, 2])  # live, before the crash
    compare(topic, got, by_offset, counts)

    b.kill()
    assert b.returncodes[-1] == -9
    if "log.segment.bytes" in overrides:
        for p in range(3):
            files = b.segment_files(topic, p)
            check_segment_names(files)
            assert len(files) > 1, f"partition {p}: expected rolled segments at 256 KiB, found {[f.name for f in files]}"
    b.restart()

    got, marks = read_partitions(b.bootstrap, topic, [0, 1, 2])
    for p in range(3):
        assert marks[p] == (0, counts[p]), f"{topic}[{p}] watermarks after restart {marks[p]}, expected (0, {counts[p]})"
    compare(topic, got, by_offset, counts)
    # reads that start inside older segments find their offsets (index lookups after recovery)
    for part in range(3):
        for start in (1, counts[part] // 3, counts[part] - 1):
            rows = read_from(b.bootstrap, topic, part, start, counts[part])
            assert [r[0] for r in rows] == list(range(start, counts[part])), f"{topic}[{part}] from {start}: {[r[0] for r in rows][:5]}"
            assert all(r[2] == by_offset[(part, r[0])].value for r in rows)

    # the log carries on where it was
    p, _ = producer(b.bootstrap)
    for part in range(3):
        assert produce_one(p, topic, part, b"after", b"restart") == counts[part]


@pytest.mark.timeout(120)
def test_sigkill_while_producing_keeps_every_acked_message(start_broker):
    """Kill the broker with requests in flight: acked messages are all there, once, where acked."""
    b = start_broker()
    topic = "inflight"
    create_topic(b.bootstrap, topic, partitions=2)
    msgs = make_messages(60_000, 2, seed=42, edge_cases=False)  # keys identify messages
    # retries=0: a message is sent at most once, so nothing may appear twice
    p, errors = producer(b.bootstrap, retries=0, message_timeout_ms=6000, linger_ms=2, batch_num_messages=250)
    res = None
    killed_after = None
    for start in range(0, len(msgs), 250):
        res = produce(p, topic, msgs[start : start + 250], res)
        p.poll(0.005)
        if killed_after is None and len(res.acked) >= 5000:
            killed_after = start + 250
            # keep a few more requests in flight, then crash
            res = produce(p, topic, msgs[killed_after : killed_after + 2000], res)
            p.poll(0)
            b.kill()
            break
    if killed_after is None:  # a slow machine: everything queued before 5000 acks; crash with what is left
        deadline = time.monotonic() + 60
        while len(res.acked) < 5000:
            assert time.monotonic() < deadline, f"only {len(res.acked)} acks after 60s; client errors {errors[:5]}"
            p.poll(0.01)
        killed_after = len(msgs)
        b.kill()
    p.flush(30)
    sent = len(res.deliveries)
    assert all(d.done for d in res.deliveries), "delivery reports missing after flush"
    acked = res.acked
    assert len(acked) >= 5000

    b.restart()
    got, marks = read_partitions(b.bootstrap, topic, [0, 1])

    by_key = {m.key: m for m in msgs[:sent]}
    for part in (0, 1):
        rows = got[part]
        low, high = marks[part]
        assert low == 0
        assert [r[0] for r in rows] == list(range(high)), f"partition {part}: offsets have holes"
        keys = [r[1] for r in rows]
        dupes = [k for k, c in Counter(keys).items() if c > 1]
        assert not dupes, f"partition {part}: messages stored twice: {dupes[:5]}"
        for off, key, value, headers, _ts in rows:
            m = by_key.get(key)
            assert m is not None and m.partition == part, f"{part}/{off}: message with key {key!r} was never sent here"
            assert (value, headers) == (m.value, m.headers), f"{part}/{off}: content differs from message {m.seq}"
    stored = {(part, r[0]): r[1] for part in (0, 1) for r in got[part]}
    lost = []
    for i in acked:
        d, m = res.deliveries[i], msgs[i]
        if stored.get((d.partition, d.offset)) != m.key:
            lost.append((m.seq, d.partition, d.offset, stored.get((d.partition, d.offset))))
    assert not lost, f"{len(lost)} of {len(acked)} acknowledged messages missing or moved after SIGKILL; first: {lost[:5]}"
    print(f"sent {sent}, acked {len(acked)}, stored {len(stored)} after the crash")


@pytest.mark.timeout(90)
def test_sigterm_is_clean_and_keeps_everything(start_broker):
    b = start_broker()
    topic = "clean"
    create_topic(b.bootstrap, topic, partitions=2)
    msgs = make_messages(10_000, 2, seed=43)
    counts = Counter(m.partition for m in msgs)
    res = produce_all(b.bootstrap, topic, msgs)
    by_offset = index_by_offset(msgs, res)
    rc = b.stop()
    assert rc == 0, f"broker exit code after SIGTERM: {rc}\n{b.log_tail(20)}"
    b.restart()
    got, marks = read_partitions(b.bootstrap, topic, [0, 1])
    assert {p: marks[p] for p in (0, 1)} == {p: (0, counts[p]) for p in (0, 1)}
    compare(topic, got, by_offset, counts)


@pytest.mark.timeout(60)
def test_time_based_segment_roll(start_broker):
    b = start_broker({"log.roll.ms": 300})
    topic = "rolling"
    create_topic(b.bootstrap, topic, partitions=1)
    now = int(time.time() * 1000)
    first = make_messages(50, 1, seed=44, base_ts=now)
    produce_all(b.bootstrap, topic, first)
    time.sleep(1.0)
    second = make_messages(50, 1, seed=45, base_ts=int(time.time() * 1000))
    produce_all(b.bootstrap, topic, second)
    files = b.segment_files(topic, 0)
    check_segment_names(files)
    assert len(files) >= 2, f"log.roll.ms=300 but one segment after a 1 s pause: {[f.name for f in files]}"
    assert "%020d.log" % 50 in [f.name for f in files], [f.name for f in files]
    b.kill()
    b.restart()
    got, marks = read_partitions(b.bootstrap, topic, [0])
    assert marks[0] == (0, 100)
    assert [g[2] for g in got[0]] == [m.value for m in first + second]


# ---------------------------------------------------------------------------
# torn / corrupt tail
# ---------------------------------------------------------------------------


def damage_segment(path, how: str) -> tuple[int, int]:
    """Damage the segment file; returns (records in the valid prefix, bytes of valid prefix)."""
    data = bytearray(path.read_bytes())
    batches, end, reason = valid_prefix(data)
    assert reason is None and end == len(data), f"segment {path.name} as written by the broker is not clean: {reason} at {end}/{len(data)}"
    assert len(batches) >= 3, f"expected at least 3 batches (3 flushes), found {len(batches)}"
    last_pos, last = batches[-1]
    total = last.next_offset
    rng = random.Random(7)
    if how == "garbage-appended":
        data += rng.randbytes(1000)
        keep, keep_bytes = total, len(path.read_bytes())
    elif how == "zeros-appended":
        data += bytes(4096)
        keep, keep_bytes = total, len(path.read_bytes())
    elif how == "cut-mid-batch":
        del data[last_pos + last.size // 2 :]
        keep, keep_bytes = last.base_offset, last_pos
    elif how == "flipped-bytes":
        mid = last_pos + HEADER_SIZE + (last.size - HEADER_SIZE) // 2
        for i in range(mid, mid + 8):
            data[i] ^= 0xA5
        keep, keep_bytes = last.base_offset, last_pos
    else:  # pragma: no cover
        raise ValueError(how)
    _, vend, vreason = valid_prefix(data)
    assert vreason is not None and vend == keep_bytes, "test bug: damage not detectable"
    path.write_bytes(bytes(data))
    return keep, keep_bytes


@pytest.mark.timeout(90)
@pytest.mark.parametrize("how", ["garbage-appended", "cut-mid-batch", "flipped-bytes", "zeros-appended"])
def test_torn_tail_is_truncated_on_restart(start_broker, how):
    b = start_broker()
    topic = "orders"
    create_topic(b.bootstrap, topic, partitions=1)
    msgs = make_messages(850, 1, seed=51)
    p, errors = producer(b.bootstrap)
    res = None
    for chunk in (msgs[:400], msgs[400:800], msgs[800:]):  # three flushes: at least three batches
        res = produce(p, topic, chunk, res)
        flush(p)
    assert not res.failed, res.first_errors()
    by_offset = index_by_offset(msgs, res)

    b.kill()  # unclean: recovery must run on restart
    files = b.segment_files(topic, 0)
    check_segment_names(files)
    keep, keep_bytes = damage_segment(files[-1], how)
    assert 0 < keep <= 850

    mark = b.log_offset()
    b.restart()
    line = b.wait_for_log(r"(?i)(?=.*\btruncated\b)(?=.*\borders-0\b)", since=mark)
    print("broker:", line)

    got, marks = read_partitions(b.bootstrap, topic, [0])
    assert marks[0] == (0, keep), f"after repairing a {how} tail: watermarks {marks[0]}, expected (0, {keep})"
    compare(topic, got, {k: v for k, v in by_offset.items() if k[1] < keep}, Counter({0: keep}))

    # the repaired log takes new writes at the right offset, and they survive another crash
    assert produce_one(p, topic, 0, b"new", b"after repair") == keep
    b.kill()
    b.restart()
    got, marks = read_partitions(b.bootstrap, topic, [0])
    assert marks[0] == (0, keep + 1)
    assert (got[0][-1][0], got[0][-1][1], got[0][-1][2]) == (keep, b"new", b"after repair")
    compare(topic, {0: got[0][:-1]}, {k: v for k, v in by_offset.items() if k[1] < keep}, Counter({0: keep}))


@pytest.mark.timeout(90)
def test_torn_tail_in_a_later_segment(start_broker):
    """Only the damaged batch of the newest segment goes; older segments are untouched."""
    b = start_broker({"log.segment.bytes": 64 * 1024})
    topic = "orders"
    create_topic(b.bootstrap, topic, partitions=1)
    msgs = make_messages(3000, 1, seed=52)
    p, _ = producer(b.bootstrap, batch_size=16 * 1024)
    res = None
    for chunk in (msgs[:2900], msgs[2900:2950], msgs[2950:]):
        res = produce(p, topic, chunk, res)
        flush(p)
    assert not res.failed, res.first_errors()
    by_offset = index_by_offset(msgs, res)
    b.kill()

    files = b.segment_files(topic, 0)
    check_segment_names(files)
    assert len(files) >= 3, [f.name for f in files]
    older = {f.name: f.read_bytes() for f in files[:-1]}
    last = files[-1]
    data = last.read_bytes()
    batches, end, reason = valid_prefix(data)
    assert reason is None and batches, f"newest segment {last.name} not clean: {reason}"
    last_pos, last_hdr = batches[-1]
    assert int(last.name[:20]) == batches[0][1].base_offset, "segment name is not its base offset"
    last.write_bytes(data[: last_pos + last_hdr.size - 7])  # cut the last batch short
    keep = last_hdr.base_offset

    mark = b.log_offset()
    b.restart()
    b.wait_for_log(r"(?i)(?=.*\btruncated\b)(?=.*\borders-0\b)", since=mark)
    got, marks = read_partitions(b.bootstrap, topic, [0])
    assert marks[0] == (0, keep)
    compare(topic, got, {k: v for k, v in by_offset.items() if k[1] < keep}, Counter({0: keep}))
    for name, content in older.items():
        assert (b.partition_dir(topic, 0) / name).read_bytes() == content, f"recovery changed older segment {name}"


@pytest.mark.timeout(90)
def test_topic_metadata_survives_restart(start_broker):
    """Topics, grown partition counts and deletions are all as they were after a crash."""
    from confluent_kafka.admin import NewPartitions

    from helpers.kafka import admin, topic_partitions, wait_topic

    b = start_broker()
    # names that trip up "<topic>-<partition>" directory parsing
    names = {"events-2024": 2, "a.b_c-d": 1, "grown": 2, "doomed": 1, "x-1-0": 3}
    for name, n in names.items():
        create_topic(b.bootstrap, name, partitions=n)
    a = admin(b.bootstrap)
    a.create_partitions([NewPartitions("grown", 4)])["grown"].result(20)
    wait_topic(a, "grown", 4)
    names["grown"] = 4
    a.delete_topics(["doomed"])["doomed"].result(20)
    del names["doomed"]
    p, _ = producer(b.bootstrap)
    expected = {}
    for name, n in names.items():
        for part in range(n):
            value = f"{name}/{part}".encode()
            assert produce_one(p, name, part, b"k", value) == 0
            expected[(name, part)] = value

    b.kill()
    b.restart()
    a = admin(b.bootstrap)
    md = a.list_topics(timeout=10)
    listed = {t: len(tm.partitions) for t, tm in md.topics.items() if not t.startswith("__")}
    assert listed == names, f"topics after restart: {listed}, expected {names}"
    assert topic_partitions(a, "doomed") is None
    for (name, part), value in expected.items():
        got, marks = read_partitions(b.bootstrap, name, [part])
        assert marks[part] == (0, 1), f"{name}[{part}] watermarks {marks[part]}"
        assert got[part][0][2] == value, f"{name}[{part}] holds {got[part][0][2]!r}, expected {value!r}"


@pytest.mark.timeout(120)
def test_idempotent_producer_across_broker_crash(start_broker):
    """enable.idempotence: a crash and restart mid-stream leaves every message exactly once, in order."""
    b = start_broker()
    topic = "idem"
    create_topic(b.bootstrap, topic, partitions=2)
    msgs = make_messages(40_000, 2, seed=46, edge_cases=False)
    p, errors = producer(b.bootstrap, enable_idempotence=True, linger_ms=2, batch_num_messages=200, message_timeout_ms=60000)
    # queue half, kill once 8000 are acknowledged (the rest still in flight), then queue the other half
    half = len(msgs) // 2
    res = None
    for start in range(0, half, 500):
        res = produce(p, topic, msgs[start : start + 500], res)
        p.poll(0.005)
    deadline = time.monotonic() + 30
    while len(res.acked) < 8000 and time.monotonic() < deadline:
        p.poll(0.01)
    assert len(res.acked) >= 8000, f"only {len(res.acked)} acks in 30 s"
    b.kill()
    time.sleep(0.5)
    b.restart()
    for start in range(half, len(msgs), 500):
        res = produce(p, topic, msgs[start : start + 500], res)
        p.poll(0.005)
    assert p.flush(60) == 0, f"undelivered after restart; client errors {errors[:5]}"
    assert not res.failed, f"{len(res.failed)} messages failed: {res.first_errors()}; client errors {errors[:5]}"
    by_offset = index_by_offset(msgs, res)  # unique, gap-free offsets
    counts = Counter(m.partition for m in msgs)
    got, marks = read_partitions(b.bootstrap, topic, [0, 1])
    for part in (0, 1):
        assert marks[part] == (0, counts[part]), f"{topic}[{part}] watermarks {marks[part]} (duplicates or losses), expected (0, {counts[part]})"
    compare(topic, got, by_offset, counts)
    for part in (0, 1):
        seqs = [by_offset[(part, r[0])].seq for r in got[part]]
        assert seqs == sorted(seqs), f"partition {part}: idempotent producer's order not kept"
