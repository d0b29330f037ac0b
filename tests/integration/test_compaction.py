"""Log compaction read back with real consumers: the latest value per key at its original offset,
tombstones gone after delete.retention.ms, aborted transactions gone, and a kill -9 in the middle
of cleaning loses nothing."""

from __future__ import annotations

import os
import time

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

from helpers.kafka import admin, producer, read_partitions

CLEANER = {"log.cleaner.backoff.ms": 200}


@pytest.fixture(scope="module")
def java(tmp_path_factory):
    from helpers.java_clients import JavaClients

    return JavaClients.build(tmp_path_factory.mktemp("java"))  # a missing JDK or jar fails: make test-deps


def _create(bootstrap: str, topic: str, **configs: str) -> None:
    a = admin(bootstrap)
    a.create_topics([NewTopic(topic, 1, 1, config=configs)], operation_timeout=30)[topic].result(30)


def _alter(bootstrap: str, topic: str, name: str, value: str) -> None:
    a = admin(bootstrap)  # kept until the answer is in
    (future,) = a.incremental_alter_configs([ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)])]).values()
    future.result(30)


def _send(p: Producer, topic: str, records: list[tuple[bytes, bytes | None]], offsets: dict) -> None:
    def delivered(err, m):
        assert err is None, err
        offsets[m.offset()] = (m.key(), m.value())

    for key, value in records:
        p.produce(topic, key=key, value=value, partition=0, on_delivery=delivered)
        p.poll(0)
    assert p.flush(30) == 0


def _read(bootstrap: str, topic: str, **config) -> list[tuple[int, bytes, bytes | None]]:
    got, _ = read_partitions(bootstrap, topic, [0], **config)
    return [(offset, key, value) for offset, key, value, *_ in got[0]]


def _read_once_cleaned(broker, topic: str, cleaned, timeout: float = 60.0, **config) -> list:
    """What a consumer reads once ``cleaned(records)`` holds: the passes run as the cleaner sees fit."""
    deadline = time.monotonic() + timeout
    while True:
        got = _read(broker.bootstrap, topic, **config)
        if cleaned(got):
            return got
        assert time.monotonic() < deadline, (got, broker.log_tail())
        time.sleep(0.5)


def _one_per_key(prefix: bytes):
    def check(got) -> bool:
        keys = [key for _, key, _ in got if key.startswith(prefix)]
        return len(keys) == len(set(keys))

    return check


def _latest(offsets: dict) -> dict[bytes, tuple[int, bytes | None]]:
    latest = {}
    for offset in sorted(offsets):
        key, value = offsets[offset]
        latest[key] = (offset, value)
    return latest


def test_compaction_keeps_latest_values_drops_tombstones_and_aborted_records(start_broker):
    broker = start_broker(CLEANER)
    topic = "compacted"
    _create(broker.bootstrap, topic, **{"cleanup.policy": "compact", "segment.bytes": "2000",
                                        "min.cleanable.dirty.ratio": "0.01"})
    offsets: dict[int, tuple[bytes, bytes | None]] = {}
    p, _ = producer(broker.bootstrap, linger_ms=0, batch_size=1000)
    for round_ in range(10):
        _send(p, topic, [(b"k%d" % k, b"v%d-%d" % (k, round_)) for k in range(10)], offsets)
    _send(p, topic, [(b"k3", None), (b"k4", None)], offsets)  # tombstones

    txn, _ = producer(broker.bootstrap, linger_ms=0, transactional_id="compaction-txn")
    txn.init_transactions(30)
    txn.begin_transaction()
    _send(txn, topic, [(b"k5", b"aborted")], {})
    txn.abort_transaction(30)
    txn.begin_transaction()
    _send(txn, topic, [(b"k6", b"committed")], offsets)
    txn.commit_transaction(30)
    # filler with keys of its own rolls the keyed records out of the active segment
    _send(p, topic, [(b"f%d" % i, b"x" * 100) for i in range(40)], offsets)

    expected = _latest(offsets)
    for isolation in ("read_committed", "read_uncommitted"):
        got = _read_once_cleaned(broker, topic, _one_per_key(b"k"), isolation_level=isolation)
        assert all(offsets[offset] == (key, value) for offset, key, value in got)  # offsets never change
        assert {key: (offset, value) for offset, key, value in got if key.startswith(b"k")} == {
            key: value for key, value in expected.items() if key.startswith(b"k")}  # tombstones still there
        assert b"aborted" not in [value for _, _, value in got]
    assert len(got) < len(offsets)

    # delete.retention.ms now 0: the next pass (more dirty data) drops the tombstones
    _alter(broker.bootstrap, topic, "delete.retention.ms", "0")
    _send(p, topic, [(b"f%d" % i, b"y" * 100) for i in range(40)], offsets)
    got = _read_once_cleaned(broker, topic, lambda got: not {b"k3", b"k4"} & {key for _, key, _ in got})
    values = {key: value for _, key, value in got}
    assert values[b"k6"] == b"committed" and values[b"k5"] == b"v5-9" and values[b"k9"] == b"v9-9"

    broker.restart()  # the cleaned log loads as it was left
    assert _read(broker.bootstrap, topic) == got


def test_kill_9_while_cleaning_loses_nothing(start_broker):
    # throttled so the kill lands inside a pass
    broker = start_broker({**CLEANER, "log.cleaner.io.max.bytes.per.second": 30000})
    topic = "killed-while-cleaning"
    _create(broker.bootstrap, topic, **{"segment.bytes": "4000"})
    offsets: dict[int, tuple[bytes, bytes | None]] = {}
    p, _ = producer(broker.bootstrap, linger_ms=0, batch_size=1000)
    for round_ in range(12):
        _send(p, topic, [(b"k%d" % k, b"v%d-%d-" % (k, round_) + b"x" * 50) for k in range(50)], offsets)
    _alter(broker.bootstrap, topic, "cleanup.policy", "compact")  # one pass over all of it starts now
    broker.wait_for_log(f"cleaning {topic}-0 below offset", timeout=60)
    deadline = time.monotonic() + 60
    while not list(broker.partition_dir(topic, 0).glob("*.log.cleaned")):  # cleaned segments written, not swapped
        assert time.monotonic() < deadline, broker.log_tail()
        time.sleep(0.05)
    assert not broker.log_since_start().count(f"cleaned {topic}-0")
    broker.kill()
    broker.overrides.pop("log.cleaner.io.max.bytes.per.second")
    broker.start()
    assert "discarded the unfinished cleaning of" in broker.log_since_start()  # the old segments stayed
    broker.wait_for_log(f"cleaned {topic}-0 below offset", timeout=60)
    got = _read(broker.bootstrap, topic)
    assert all(offsets[offset] == (key, value) for offset, key, value in got)
    assert {key: (offset, value) for offset, key, value in got} == _latest(offsets)  # read in order: last wins
    assert len(got) < len(offsets)


# batches that lose records are compressed again as they came (lz4: frames of independent blocks, as Java reads)
CODECS = [("gzip", 1), ("snappy", 2), ("lz4", 3), ("zstd", 4)]


def test_cleaned_compressed_batches_stay_compressed_and_readable(start_broker, java):
    from helpers.java_clients import every, unhex
    from protocol.records import scan_batches

    broker = start_broker(CLEANER)
    for name, bits in CODECS:
        topic = f"compacted-{name}"
        _create(broker.bootstrap, topic, **{"segment.bytes": "4000"})
        offsets: dict[int, tuple[bytes, bytes | None]] = {}
        p, _ = producer(broker.bootstrap, linger_ms=50, batch_size=1500, compression_type=name)
        for round_ in range(6):  # batches of many records, some of whose keys come again later
            _send(p, topic, [(b"k%d" % (k * round_ % 37), b"v%d-%d-" % (k, round_) + b"x" * 40) for k in range(60)],
                  offsets)
        _send(p, topic, [(b"f%d" % i, os.urandom(200)) for i in range(120)], offsets)  # rolls the keyed data out
        _alter(broker.bootstrap, topic, "cleanup.policy", "compact")
        got = _read_once_cleaned(broker, topic, _one_per_key(b"k"))
        assert {key: (offset, value) for offset, key, value in got} == _latest(offsets), name
        batches = [hdr for path in broker.segment_files(topic, 0) for _, hdr in scan_batches(path.read_bytes())]
        reencoded = [h for h in batches if 0 < h.records_count < h.last_offset_delta + 1]  # lost some records
        assert reencoded and all(h.compression == bits for h in reencoded), name  # compressed as they came

        lines = java.run(broker.bootstrap, "consume", topic, 0, "read_committed", "")
        assert {(r["offset"], unhex(r["key"]), unhex(r["value"])) for r in every(lines, "record")} == set(got), name
