"""Idempotent producers: no duplicates and no reordering per partition, across restarts.

The sequence rules are checked with a raw-wire client (tests/helpers/wire.py)
that builds batches with protocol/records.py, because only a client that
misbehaves on purpose can send a batch twice, skip a sequence or reuse an old
epoch. Real clients then run against the same broker with lost
acknowledgements (the MOLDAU_FAULT_DROP_RESPONSE_EVERY hook) and through
kill -9 restarts, and every acknowledged message must be stored exactly once,
in order.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from helpers.kafka import compare, create_topic, index_by_offset, make_messages, produce_all, read_partitions
from helpers.wire import WireClient
from protocol.records import build_batch, control_batch

NONE = 0
OUT_OF_ORDER_SEQUENCE_NUMBER = 45
INVALID_PRODUCER_EPOCH = 47
INVALID_REQUEST = 42
INVALID_RECORD = 87

MAX_SEQUENCE = 2**31 - 1
STREAM_PRODUCER = Path(__file__).resolve().parent.parent / "helpers" / "idempotent_stream.py"


# --- raw-wire helpers -----------------------------------------------------------


def init_producer_id(c: WireClient, producer_id: int = -1, epoch: int = -1, transactional_id=None) -> tuple:
    r = c.request("InitProducerId", 4, {"transactional_id": transactional_id, "transaction_timeout_ms": 60000,
                                        "producer_id": producer_id, "producer_epoch": epoch})
    return r["error_code"], r["producer_id"], r["producer_epoch"]


def produce(c: WireClient, topic: str, records: bytes, partition: int = 0) -> tuple[int, int]:
    """(error code, base offset) of one partition's Produce answer."""
    r = c.request("Produce", 9, {"transactional_id": None, "acks": -1, "timeout_ms": 10000, "topic_data": [
        {"name": topic, "partition_data": [{"index": partition, "records": records}]}]})
    part = r["responses"][0]["partition_responses"][0]
    return part["error_code"], part["base_offset"]


def log_end(c: WireClient, topic: str, partition: int = 0) -> int:
    r = c.request("ListOffsets", 7, {"replica_id": -1, "topics": [
        {"name": topic, "partitions": [{"partition_index": partition, "current_leader_epoch": -1, "timestamp": -1}]}]})
    return r["topics"][0]["partitions"][0]["offset"]


def batch(pid: int, epoch: int, seq: int, n: int = 1, tag: str = "m", **kwargs) -> bytes:
    return build_batch([(None, f"{tag}-{seq}-{i}".encode()) for i in range(n)],
                       producer_id=pid, producer_epoch=epoch, base_sequence=seq, **kwargs)


# --- sequence rules ---------------------------------------------------------------


def test_duplicates_gaps_and_epochs(broker):
    topic = "wire-idem"
    with WireClient(broker.port) as c:
        code, pid, epoch = init_producer_id(c)
        assert (code, epoch) == (NONE, 0) and pid >= 0

        first = batch(pid, 0, 0, n=3)
        assert produce(c, topic, first) == (NONE, 0)
        assert produce(c, topic, first) == (NONE, 0), "a resent batch is answered with its original offset"
        assert log_end(c, topic) == 3, "the resent batch must not be stored again"
        assert produce(c, topic, batch(pid, 0, 3, n=2)) == (NONE, 3)
        assert produce(c, topic, first) == (NONE, 0), "any of the last five batches is recognised"

        assert produce(c, topic, batch(pid, 0, 6))[0] == OUT_OF_ORDER_SEQUENCE_NUMBER, "sequence 5 was skipped"
        assert produce(c, topic, batch(pid, 0, 4, n=2))[0] == OUT_OF_ORDER_SEQUENCE_NUMBER, "overlaps a stored batch"
        assert log_end(c, topic) == 5

        # KIP-360: the producer asks for its epoch to be bumped and restarts its sequences
        assert init_producer_id(c, pid, 0) == (NONE, pid, 1)
        assert produce(c, topic, batch(pid, 1, 3))[0] == OUT_OF_ORDER_SEQUENCE_NUMBER, "a new epoch starts at 0"
        assert produce(c, topic, batch(pid, 1, 0)) == (NONE, 5)
        assert produce(c, topic, batch(pid, 0, 5))[0] == INVALID_PRODUCER_EPOCH, "the old epoch is fenced"
        assert produce(c, topic, first)[0] == INVALID_PRODUCER_EPOCH, "so are its retries"

        # one batch per partition (Kafka's rule from Produce v3 on): more are refused before anything is stored
        assert produce(c, topic, batch(pid, 1, 1) + batch(pid, 1, 2, n=2))[0] == INVALID_RECORD
        assert log_end(c, topic) == 6
        assert produce(c, topic, batch(pid, 1, 1)) == (NONE, 6)
        assert produce(c, topic, batch(pid, 1, 2, n=2)) == (NONE, 7)
        assert log_end(c, topic) == 9

        # fields that do not go together, and control batches, which only the broker writes
        for bad in (
            batch(pid, 1, -1),
            batch(pid, -1, 4),
            batch(-1, -1, -1, transactional=True),
            control_batch(1, pid, 1, 0),
        ):
            assert produce(c, topic, bad)[0] == INVALID_RECORD
        assert log_end(c, topic) == 9
        assert produce(c, topic, batch(pid, 1, 4)) == (NONE, 9), "the producer carries on after refusals"
        assert produce(c, topic, build_batch([(b"k", b"plain")])) == (NONE, 10), "plain producers are unaffected"
        assert produce(c, topic, batch(-1, -1, 0)) == (NONE, 11), "a sequence without producer id means nothing"

    from kafka import TopicPartition
    from kafka.admin import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=10000)
    try:
        state = admin.describe_producers([TopicPartition(topic, 0)])[TopicPartition(topic, 0)]
    finally:
        admin.close()
    (p,) = state.active_producers
    assert (p.producer_id, p.producer_epoch, p.last_sequence) == (pid, 1, 4)
    assert abs(p.last_timestamp - time.time() * 1000) < 60_000
    assert (p.coordinator_epoch, p.current_transaction_start_offset) == (-1, -1)


def test_sequence_wraps_after_max_int32(broker):
    """Sequences wrap from 2**31-1 to 0, between batches and inside one.

    A producer the partition has no state for may start at any sequence --
    Kafka accepts this since 2.5 (KIP-360), because a live producer whose
    state expired must be able to carry on. That is how this test starts a
    fresh producer id near the end of the sequence range.
    """
    topic = "wire-wrap"
    with WireClient(broker.port) as c:
        _, pid, _ = init_producer_id(c)
        assert produce(c, topic, batch(pid, 0, MAX_SEQUENCE - 1, n=2)) == (NONE, 0)
        assert produce(c, topic, batch(pid, 0, 1))[0] == OUT_OF_ORDER_SEQUENCE_NUMBER
        wrapped = batch(pid, 0, 0, n=2)
        assert produce(c, topic, wrapped) == (NONE, 2)
        assert produce(c, topic, wrapped) == (NONE, 2)

        _, other, _ = init_producer_id(c)
        across = batch(other, 0, MAX_SEQUENCE, n=3)  # sequences 2**31-1, 0, 1
        assert produce(c, topic, across) == (NONE, 4)
        assert produce(c, topic, across) == (NONE, 4)
        assert produce(c, topic, batch(other, 0, 1))[0] == OUT_OF_ORDER_SEQUENCE_NUMBER
        assert produce(c, topic, batch(other, 0, 2)) == (NONE, 7)
        assert log_end(c, topic) == 8


def test_init_producer_id(broker):
    with WireClient(broker.port) as c:
        ids = {init_producer_id(c)[1] for _ in range(5)}
        assert len(ids) == 5
        pid = max(ids)
        assert init_producer_id(c, pid, 7) == (NONE, pid, 8)
        code, fresh, epoch = init_producer_id(c, pid, 2**15 - 1)
        assert (code, epoch) == (NONE, 0) and fresh not in ids, "an exhausted epoch gets a new producer id"
        code, fresh2, epoch = init_producer_id(c, 10**12, 3)
        assert (code, epoch) == (NONE, 0) and fresh2 not in ids | {fresh}, "an id never issued is not bumped"
        assert init_producer_id(c, pid, -1)[0] == INVALID_REQUEST
        assert init_producer_id(c, -1, 4)[0] == INVALID_REQUEST
        code, txn_pid, _ = init_producer_id(c, transactional_id="txn")
        assert code == NONE and txn_pid not in ids | {fresh, fresh2}, "the transaction coordinator's ids are new too"
        # the oldest version, without the KIP-360 fields
        r = c.request("InitProducerId", 0, {"transactional_id": None, "transaction_timeout_ms": 60000})
        assert (r["error_code"], r["producer_epoch"]) == (NONE, 0)
        assert r["producer_id"] not in ids | {fresh, fresh2, txn_pid}


# --- restarts -------------------------------------------------------------------


def test_state_and_producer_ids_survive_kill_and_restart(start_broker):
    """Duplicates are still recognised after kill -9 (state rebuilt from snapshot + log),
    after a clean restart (snapshot at the log end), and with a corrupt snapshot (whole log)."""
    b = start_broker({"log.segment.bytes": 2048})
    topic = "wire-restart"
    sent = []
    with WireClient(b.port) as c:
        _, pid, _ = init_producer_id(c)
        seq = 0
        for _i in range(40):  # ~100 bytes each: several segment rolls, each with a snapshot
            data = batch(pid, 0, seq, n=2, tag="x" * 20)
            code, offset = produce(c, topic, data)
            assert code == NONE
            sent.append((data, offset))
            seq += 2
        end = log_end(c, topic)
    snapshots = sorted(b.partition_dir(topic, 0).glob("*.snapshot"))
    assert len(snapshots) == 1 and int(snapshots[0].stem) > 0, f"one snapshot from the last roll: {snapshots}"

    def check_duplicates(how: str) -> None:
        with WireClient(b.port) as c:
            for data, offset in sent[-5:]:
                assert produce(c, topic, data) == (NONE, offset), f"resent batch after {how}"
            assert log_end(c, topic) == end, f"a duplicate was stored again after {how}"

    b.kill()
    b.restart()
    check_duplicates("kill -9")
    with WireClient(b.port) as c:
        code, pid2, _ = init_producer_id(c)
        assert code == NONE and pid2 > pid, "producer ids are never reused after a crash"
    b.stop()
    at_end = b.partition_dir(topic, 0) / f"{end:020d}.snapshot"
    assert at_end.exists(), "clean shutdown writes a snapshot at the log end"
    b.restart()
    check_duplicates("a clean restart")
    b.stop()
    raw = bytearray(at_end.read_bytes())
    raw[-1] ^= 0xFF
    at_end.write_bytes(bytes(raw))
    mark = b.log_offset()
    b.restart()
    b.wait_for_log(r"deleted 0*%d\.snapshot \(CRC32C mismatch\)" % end, since=mark)
    check_duplicates("a corrupt snapshot")
    with WireClient(b.port) as c:
        assert produce(c, topic, batch(pid, 0, seq)) == (NONE, end), "the producer carries on"


def test_idle_producers_expire(start_broker):
    b = start_broker({"producer.id.expiration.ms": 1000, "producer.id.expiration.check.interval.ms": 100})
    topic = "wire-expire"
    with WireClient(b.port) as c:
        _, pid, _ = init_producer_id(c)
        first = batch(pid, 0, 0)
        assert produce(c, topic, first) == (NONE, 0)

        def active() -> int:
            r = c.request("DescribeProducers", 0, {"topics": [{"name": topic, "partition_indexes": [0]}]})
            return len(r["topics"][0]["partitions"][0]["active_producers"])

        assert active() == 1
        deadline = time.monotonic() + 10
        while active():
            assert time.monotonic() < deadline, "producer state did not expire"
            time.sleep(0.1)
        b.wait_for_log("expired the state of 1 idle producer")
        # nothing is known about the producer any more, so any sequence is accepted
        assert produce(c, topic, batch(pid, 0, 7)) == (NONE, 1)


# --- real clients -----------------------------------------------------------------


@pytest.mark.timeout(120)
@pytest.mark.parametrize("in_flight", [1, 5])
def test_lost_acks_are_retried_without_duplicates(start_broker, monkeypatch, in_flight):
    """Every 7th Produce response is dropped after the append; retries must not duplicate or reorder."""
    monkeypatch.setenv("MOLDAU_FAULT_DROP_RESPONSE_EVERY", "7")
    b = start_broker()
    topic = "lost-acks"
    create_topic(b.bootstrap, topic, partitions=3)
    msgs = make_messages(12_000, 3, seed=44)
    res = produce_all(b.bootstrap, topic, msgs, enable_idempotence=True, max_in_flight=in_flight,
                      batch_num_messages=50, linger_ms=2, retry_backoff_ms=20)
    dropped = b.log_text().count("response dropped")
    assert dropped >= 10, f"the fault hook dropped only {dropped} responses"

    by_offset = index_by_offset(msgs, res)  # acked offsets are unique and dense: nothing stored twice
    counts = Counter(m.partition for m in msgs)
    got, marks = read_partitions(b.bootstrap, topic, [0, 1, 2])
    for p in range(3):
        assert marks[p] == (0, counts[p]), f"partition {p} holds {marks[p][1]} records for {counts[p]} messages"
    compare(topic, got, by_offset, counts)
    for p in range(3):
        seqs = [by_offset[(p, row[0])].seq for row in got[p]]
        assert seqs == sorted(seqs), f"partition {p}: messages stored out of order"


@pytest.mark.timeout(180)
def test_stream_survives_three_kills(start_broker, tmp_path):
    """A separate producer process streams 200k messages while the broker is killed and restarted 3 times."""
    n, partitions = 200_000, 3
    b = start_broker({"log.segment.bytes": 1 << 20})
    topic = "crash-stream"
    create_topic(b.bootstrap, topic, partitions=partitions)
    progress, result, stderr = tmp_path / "progress", tmp_path / "result.json", tmp_path / "producer.stderr"
    with open(stderr, "wb") as err:
        proc = subprocess.Popen(
            [sys.executable, str(STREAM_PRODUCER), b.bootstrap, topic, str(n), str(partitions), str(progress),
             str(result)],
            stdout=subprocess.DEVNULL, stderr=err,
        )

    def acked_so_far() -> int:
        return int(progress.read_text() or 0) if progress.exists() else 0

    try:
        for kill in range(1, 4):
            # a crash at each fifth of the stream (20, 40, 60 %): fixed marks, not a fifth more than the last
            # kill saw, so a fast producer's overshoot past one mark cannot use up the stream before the third
            target = kill * n // 5
            deadline = time.monotonic() + 60
            while acked_so_far() < target:
                assert proc.poll() is None, f"producer exited early: {stderr.read_text()[-2000:]}"
                assert time.monotonic() < deadline, f"producer stalled below {target} acknowledged messages"
                time.sleep(0.02)
            assert proc.poll() is None, "the producer finished before the crash"
            b.kill()
            b.restart()
        proc.wait(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 0, f"producer failed: {stderr.read_text()[-3000:]}"
    report = json.loads(result.read_text())
    assert not report["fatal"], report["fatal"]
    acked = report["acked"]  # seq -> [partition, offset]
    assert len(acked) == n, f"{n - len(acked)} messages were not acknowledged: {report['errors'][:5]}"

    got, marks = read_partitions(b.bootstrap, topic, list(range(partitions)), timeout=90)
    for p in range(partitions):
        stored = [int(row[1]) for row in got[p]]
        assert stored == sorted(set(stored)), f"partition {p}: messages duplicated or out of order"
        assert len(stored) == marks[p][1] == len(range(p, n, partitions))
        for offset, key in ((row[0], row[1].decode()) for row in got[p]):
            assert acked[key] == [p, offset], f"message {key} stored at {p}/{offset}, acknowledged at {acked[key]}"
