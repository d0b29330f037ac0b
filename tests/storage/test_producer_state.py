"""Producer state of a partition log: checks, snapshots, rebuilding after crashes and truncation."""

import pytest
from storage_support import append, crash_copy

from protocol.records import build_batch
from storage.config import LogConfig
from storage.errors import OutOfOrderSequence
from storage.log import Log
from storage.producer_state import BATCHES_PER_PRODUCER, decode_snapshot, encode_snapshot, snapshot_name

PID = 42


def batch(seq: int, n: int = 2, epoch: int = 0, pid: int = PID) -> bytes:
    return build_batch([(None, b"value-%06d" % (seq + i)) for i in range(n)], timestamp_ms=5_000,
                       producer_id=pid, producer_epoch=epoch, base_sequence=seq)


BATCH = len(batch(0))


@pytest.fixture
def log_dir(tmp_path):
    return tmp_path / "idem-0"


def rolling_log(log_dir) -> Log:
    return Log(log_dir, LogConfig(segment_bytes=4 * BATCH + 1))  # four batches per segment


def snapshots(log_dir) -> list[str]:
    return sorted(p.name for p in log_dir.glob("*.snapshot"))


def test_snapshot_round_trip_keeps_the_last_five_batches(log_dir):
    log = rolling_log(log_dir)
    for i in range(7):
        append(log, batch(2 * i), batch(0, pid=7) if i == 0 else batch(2 * i, pid=7))
    state = log.producer_state.producers
    assert len(state[PID].batches) == BATCHES_PER_PRODUCER
    decoded = decode_snapshot(encode_snapshot(state.values()))
    assert {pid: list(e.batches) for pid, e in decoded.items()} == {pid: list(e.batches) for pid, e in state.items()}
    assert decoded[PID].last_seq == 13 and decoded[PID].producer_epoch == 0


def test_snapshot_at_each_roll_and_at_close(log_dir):
    log = rolling_log(log_dir)
    for i in range(9):
        append(log, batch(2 * i))
    assert [s.base_offset for s in log.segments] == [0, 8, 16]
    assert snapshots(log_dir) == [snapshot_name(16)], "a roll replaces the previous snapshot"
    log.close()
    assert snapshots(log_dir) == [snapshot_name(18)]
    reopened = rolling_log(log_dir)
    assert append(reopened, batch(8)) == (8, 9), "a retry is answered from the snapshot"
    assert append(reopened, batch(18)) == (18, 19)


def test_crash_rebuilds_from_the_snapshot_and_the_batches_after_it(log_dir, tmp_path):
    log = rolling_log(log_dir)
    for i in range(10):
        append(log, batch(2 * i))
    crashed = Log(crash_copy(log_dir, tmp_path / "crash" / "idem-0"), LogConfig(segment_bytes=4 * BATCH + 1),
                  needs_recovery=True)
    assert crashed.producer_state.producers[PID].last_seq == 19
    assert append(crashed, batch(18)) == (18, 19)
    assert append(crashed, batch(10)) == (10, 11), "still one of the last five"
    with pytest.raises(OutOfOrderSequence):
        append(crashed, batch(22))


def test_truncation_below_a_snapshot_rebuilds_the_state(log_dir):
    log = rolling_log(log_dir)
    for i in range(10):
        append(log, batch(2 * i))
    log.truncate_to(6)  # keeps sequences 0..5
    assert snapshots(log_dir) == [], "the snapshot described batches that are gone"
    assert log.producer_state.producers[PID].last_seq == 5
    assert append(log, batch(6)) == (6, 7), "the truncated batch is new again"


def test_corrupt_and_stale_snapshots_are_deleted_and_reported(log_dir):
    log = rolling_log(log_dir)
    for i in range(5):
        append(log, batch(2 * i))
    log.close()
    (log_dir / snapshot_name(10)).write_bytes(b"\x00\x07" + bytes(20))
    (log_dir / snapshot_name(99)).write_bytes(encode_snapshot([]))
    reopened = rolling_log(log_dir)
    assert reopened.repairs == [
        f"deleted {snapshot_name(99)}: past the log end 10",
        f"deleted {snapshot_name(10)} (unknown version 7); rebuilding producer state from the log",
    ]
    assert snapshots(log_dir) == []
    assert reopened.producer_state.producers[PID].last_seq == 9


def test_idle_producers_expire_unless_in_a_transaction(log_dir):
    log = rolling_log(log_dir)
    append(log, batch(0), now_ms=1_000)
    append(log, batch(0, pid=7), now_ms=5_000)
    state = log.producer_state
    assert state.remove_expired(now_ms=5_999, expiration_ms=5_000) == 0
    assert state.remove_expired(now_ms=6_000, expiration_ms=5_000) == 1
    assert list(state.producers) == [7]
    state.producers[7].current_txn_first_offset = 2
    assert state.remove_expired(now_ms=100_000, expiration_ms=5_000) == 0


def test_the_least_recently_used_idle_producer_is_forgotten_past_the_cap(log_dir, monkeypatch):
    import storage.producer_state as producer_state

    monkeypatch.setattr(producer_state, "MAX_PRODUCERS", 3)
    log = Log(log_dir, LogConfig())
    append(log, build_batch([(None, b"t")], producer_id=1, producer_epoch=0, base_sequence=0, transactional=True))
    for pid in (2, 3):
        append(log, batch(0, pid=pid))
    append(log, batch(2, pid=2))  # producer 2 used again: 3 is now the least recently used idle one
    append(log, batch(0, pid=4))
    assert list(log.producer_state.producers) == [1, 2, 4], "1 has an open transaction, 3 was idle longest"
    append(log, batch(0, pid=5))
    assert list(log.producer_state.producers) == [1, 4, 5]
    append(log, batch(7, pid=3))  # a forgotten producer counts as expired: any sequence goes
    log.close()
