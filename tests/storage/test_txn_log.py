"""Transactions in a partition log: markers, the last stable offset, aborted-transaction indexes, recovery."""

import errno
import os
import struct

import pytest
from storage_support import append, crash_copy, split_batches

from protocol.records import build_batch, read_control_marker
from storage.config import LogConfig
from storage.errors import InvalidProducerEpoch, TransactionCoordinatorFenced
from storage.log import Log
from storage.txn_index import AbortedTxn, TransactionIndex

NOW = 10_000


def txn_batch(pid: int, seq: int, n: int = 2, epoch: int = 0) -> bytes:
    return build_batch([(None, b"p%d-%06d" % (pid, seq + i)) for i in range(n)], timestamp_ms=5_000,
                       producer_id=pid, producer_epoch=epoch, base_sequence=seq, transactional=True)


def plain(n: int = 1) -> bytes:
    return build_batch([(None, b"plain")] * n, timestamp_ms=5_000)


BATCH = len(txn_batch(1, 0))


@pytest.fixture
def log_dir(tmp_path):
    return tmp_path / "txn-0"


def rolling_log(log_dir, **kwargs) -> Log:
    return Log(log_dir, LogConfig(segment_bytes=3 * BATCH + 1), **kwargs)  # three batches per segment


def end(log: Log, pid: int, committed: bool, epoch: int = 0, coordinator_epoch: int = 0) -> int:
    return log.append_marker(pid, epoch, coordinator_epoch, committed, NOW)


def txnindex_files(log_dir) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(log_dir.glob("*.txnindex"))}


def test_the_last_stable_offset_waits_for_the_earliest_open_transaction(log_dir):
    log = Log(log_dir, LogConfig())
    append(log, plain(2))  # 0-1
    assert log.last_stable_offset == log.high_watermark == 2
    append(log, txn_batch(1, 0))  # 2-3
    append(log, txn_batch(2, 0))  # 4-5
    append(log, txn_batch(1, 2))  # 6-7
    assert (log.last_stable_offset, log.high_watermark) == (2, 8)
    data, aborted = log.read_committed(0, 1 << 20)
    assert [h.base_offset for h in split_batches(data)] == [0] and aborted == []
    assert log.read_committed(2, 1 << 20) == (b"", []), "nothing at or past the LSO"

    assert end(log, 1, committed=True) == 8
    assert log.last_stable_offset == 4, "producer 2's transaction is still open"
    assert end(log, 2, committed=False) == 9
    assert log.last_stable_offset == log.high_watermark == 10
    assert log.aborted_transactions(0, 10) == [AbortedTxn(2, 4, 9, 10)]
    data, aborted = log.read_committed(0, 1 << 20)
    assert [h.base_offset for h in split_batches(data)] == [0, 2, 4, 6, 8, 9]
    assert aborted == [AbortedTxn(2, 4, 9, 10)]
    marker = split_batches(data)[-1]
    assert marker.is_control and marker.is_transactional and (marker.producer_id, marker.records_count) == (2, 1)
    assert read_control_marker(data, len(data) - marker.size) == (0, 0)


def test_the_last_stable_offset_never_passes_the_high_watermark(log_dir):
    """A replicated partition's open transaction may begin past its high watermark; read_committed
    readers still stop at the high watermark (Kafka: the LSO is the lesser of the two)."""
    log = Log(log_dir, LogConfig())
    append(log, plain(2))  # 0-1
    append(log, plain(1))  # 2, not yet on the followers
    append(log, txn_batch(1, 0))  # 3-4, open
    log.set_high_watermark(2)
    assert (log.last_stable_offset, log.high_watermark) == (2, 2)
    data, _ = log.read_committed(0, 1 << 20)
    assert [h.base_offset for h in split_batches(data)] == [0]


def test_markers_are_not_sequenced_and_sequences_continue_after_them(log_dir):
    log = Log(log_dir, LogConfig())
    append(log, txn_batch(1, 0))
    end(log, 1, committed=True)
    assert end(log, 1, committed=True) == 3, "a marker sent again is stored again and ends nothing"
    assert log.aborted_transactions(0, 4) == []
    assert append(log, txn_batch(1, 2)) == (4, 5), "the next transaction continues the sequence"
    assert log.last_stable_offset == 4
    assert log.producer_state.producers[1].last_seq == 3


def test_an_abort_with_a_bumped_epoch_fences_the_old_producer(log_dir):
    log = Log(log_dir, LogConfig())
    append(log, txn_batch(1, 0, epoch=3))
    end(log, 1, committed=False, epoch=4)  # the coordinator fenced epoch 3 on a timeout
    with pytest.raises(InvalidProducerEpoch):
        append(log, txn_batch(1, 2, epoch=3))
    with pytest.raises(InvalidProducerEpoch):
        end(log, 1, committed=True, epoch=3)
    with pytest.raises(TransactionCoordinatorFenced):
        end(log, 1, committed=True, epoch=4, coordinator_epoch=-1)
    assert append(log, txn_batch(1, 0, epoch=5)) == (3, 4), "the next incarnation starts its sequence at 0"
    assert log.log_end_offset == 5


def test_coordinator_writes_are_checked_for_the_epoch_only(log_dir):
    log = Log(log_dir, LogConfig())
    for expected in ((0, 1), (2, 3)):  # the same sequence twice: not a retry for the coordinator
        buf = bytearray(txn_batch(7, 0, epoch=2))
        assert log.append(buf, [(0, split_batches(buf)[0])], NOW, from_coordinator=True) == expected
    buf = bytearray(txn_batch(7, 0, epoch=1))
    with pytest.raises(InvalidProducerEpoch):
        log.append(buf, [(0, split_batches(buf)[0])], NOW, from_coordinator=True)
    assert log.last_stable_offset == 0


def test_aborted_transactions_are_found_from_any_segment(log_dir):
    log = rolling_log(log_dir)
    append(log, txn_batch(1, 0))  # 0-1
    append(log, txn_batch(2, 0))  # 2-3
    append(log, plain())  # 4
    append(log, txn_batch(1, 2))  # 5-6, second segment
    end(log, 1, committed=False)  # 7: aborts 0-6 while producer 2 is open
    append(log, txn_batch(3, 0))  # 8-9
    end(log, 2, committed=False)  # 10
    end(log, 3, committed=True)  # 11
    assert [s.base_offset for s in log.segments] == [0, 5, 10]
    first, second = AbortedTxn(1, 0, 7, 2), AbortedTxn(2, 2, 10, 8)
    assert log.aborted_transactions(0, 12) == [first, second]
    assert log.aborted_transactions(8, 12) == [second], "ended before the range"
    assert log.aborted_transactions(0, 2) == [first], "began after the range"
    assert log.aborted_transactions(11, 12) == []
    assert txnindex_files(log_dir) == {
        "00000000000000000005.txnindex": struct.pack(">hqqqq", 0, 1, 0, 7, 2),
        "00000000000000000010.txnindex": struct.pack(">hqqqq", 0, 2, 2, 10, 8),
    }


def _open_and_aborted(log_dir) -> Log:
    """Aborts and open transactions on both sides of a segment roll (and its snapshot)."""
    log = rolling_log(log_dir)
    append(log, txn_batch(1, 0))  # 0-1
    append(log, txn_batch(2, 0))  # 2-3
    end(log, 1, committed=False)  # 4
    append(log, txn_batch(3, 0))  # 5-6, second segment; snapshot at 5
    end(log, 2, committed=False)  # 7
    append(log, txn_batch(1, 2))  # 8-9: producer 1's next transaction, still open
    end(log, 3, committed=True)  # 10
    return log


def test_a_crash_rebuilds_open_transactions_and_aborted_ones(log_dir, tmp_path):
    log = _open_and_aborted(log_dir)
    end(log, 1, committed=False)  # 11: aborts producer 1's second transaction
    assert [s.base_offset for s in log.segments] == [0, 5, 10]
    assert (log.last_stable_offset, log.aborted_transactions(0, 12)) == (
        12, [AbortedTxn(1, 0, 4, 2), AbortedTxn(2, 2, 7, 5), AbortedTxn(1, 8, 11, 12)])
    files = txnindex_files(log_dir)

    lost = crash_copy(log_dir, tmp_path / "lost" / "txn-0")
    (lost / "00000000000000000010.txnindex").unlink()  # written after the last snapshot, never flushed
    recovered = rolling_log(lost, needs_recovery=True)
    assert (recovered.last_stable_offset, txnindex_files(lost)) == (12, files)

    torn = crash_copy(log_dir, tmp_path / "torn" / "txn-0")
    segment = torn / "00000000000000000010.log"
    segment.write_bytes(segment.read_bytes()[:-5])  # the last marker never fully reached the disk
    recovered = rolling_log(torn, needs_recovery=True)
    assert recovered.log_end_offset == 11
    assert recovered.last_stable_offset == 8, "without its marker producer 1's transaction is open again"
    assert recovered.aborted_transactions(0, 11) == [AbortedTxn(1, 0, 4, 2), AbortedTxn(2, 2, 7, 5)]
    assert end(recovered, 1, committed=True) == 11
    assert recovered.last_stable_offset == 12


def test_a_clean_restart_keeps_the_index_and_the_open_transaction(log_dir):
    log = _open_and_aborted(log_dir)
    files = txnindex_files(log_dir)
    log.close()
    reopened = rolling_log(log_dir)
    assert reopened.repairs == []
    assert (reopened.last_stable_offset, txnindex_files(log_dir)) == (8, files)
    assert reopened.aborted_transactions(0, 11) == [AbortedTxn(1, 0, 4, 2), AbortedTxn(2, 2, 7, 5)]


def test_a_damaged_index_is_rebuilt_from_the_whole_log(log_dir):
    log = _open_and_aborted(log_dir)
    files = txnindex_files(log_dir)
    log.close()
    (log_dir / "00000000000000000000.txnindex").write_bytes(b"\x00\x01garbage")
    reopened = rolling_log(log_dir)
    assert reopened.repairs == ["rebuilding the transaction indexes (00000000000000000000.txnindex: "
                                "9 bytes is not a whole number of entries)"]
    assert txnindex_files(log_dir) == files
    assert reopened.last_stable_offset == 8


def test_truncation_reopens_a_transaction_whose_marker_it_removed(log_dir):
    log = _open_and_aborted(log_dir)
    log.truncate_to(7)  # drops producer 2's abort marker and everything after it
    assert log.aborted_transactions(0, 7) == [AbortedTxn(1, 0, 4, 2)]
    assert log.last_stable_offset == 2, "producer 2's transaction is open again"
    assert "00000000000000000005.txnindex" not in txnindex_files(log_dir)


def test_transaction_index_file_checks(tmp_path):
    index = TransactionIndex(tmp_path / "00000000000000000000.txnindex")
    index.load()
    assert index.entries == [] and not index.path.exists(), "created with its first entry"
    entries = [AbortedTxn(1, 0, 5, 2), AbortedTxn(2, 2, 9, 10), AbortedTxn(3, 10, 12, 13)]
    for entry in entries:
        index.append(entry)
    found = []
    assert index.collect(6, 10, found) is True and found == [entries[1]], "stops once the LSO passes the range"
    index.truncate_from(9)
    index.close()
    reloaded = TransactionIndex(index.path)
    reloaded.load()
    assert reloaded.entries == entries[:1]
    index.path.write_bytes(struct.pack(">hqqqq", 0, 1, 0, 5, 2) + struct.pack(">hqqqq", 0, 2, 0, 4, 5))
    with pytest.raises(Exception, match="out of order"):
        reloaded.load()
    index.path.write_bytes(struct.pack(">hqqqq", 1, 1, 0, 5, 2))
    with pytest.raises(Exception, match="version 1"):
        reloaded.load()


def test_an_abort_whose_index_entry_meets_a_full_disk_stays_hidden(log_dir, tmp_path, monkeypatch):
    """The marker is stored but its index entry cannot be written: read_committed readers must
    still skip the aborted records, the entry reaches the file once there is space, and no roll
    (with its producer-state snapshot) goes past the abort while the file lacks it."""
    log = rolling_log(log_dir)
    append(log, txn_batch(1, 0))  # 0-1
    real_write = os.write
    calls = []

    def no_space(fd, data):
        calls.append(len(data))
        if len(calls) == 1:
            return real_write(fd, bytes(data)[:7])  # a short write: a few bytes land before the disk fills up
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", no_space)
    with pytest.raises(OSError):
        end(log, 1, committed=False)  # 2: the marker is in the segment, its index entry is not on disk
    assert log.aborted_transactions(0, 3) == [AbortedTxn(1, 0, 2, 3)], "readers skip the aborted records"
    with pytest.raises(OSError):
        append(log, plain(), plain())  # 3-4 need a roll, which must not pass the unwritten entry
    assert log.log_end_offset == 3 and len(log.segments) == 1
    monkeypatch.undo()

    append(log, plain(), plain())  # space is back: the roll writes the entry first
    assert len(log.segments) == 2
    crashed = crash_copy(log_dir, tmp_path / "crashed" / "txn-0")
    recovered = rolling_log(crashed, needs_recovery=True)
    assert recovered.aborted_transactions(0, 5) == [AbortedTxn(1, 0, 2, 3)]
    assert txnindex_files(crashed) == txnindex_files(log_dir)


def test_retention_forgets_producers_whose_batches_went_unless_their_transaction_is_open(log_dir):
    log = rolling_log(log_dir)
    append(log, txn_batch(1, 0))  # 0-1: producer 1, whose transaction stays open
    append(log, txn_batch(2, 0))  # 2-3
    end(log, 2, committed=False)  # 4: aborts 2-3
    append(log, txn_batch(3, 0))  # 5-6, second segment
    end(log, 3, committed=True)  # 7
    append(log, plain())  # 8
    append(log, plain())  # 9, third segment
    assert [s.base_offset for s in log.segments] == [0, 5, 9]
    log.advance_log_start(5)
    assert log.delete_old_segments(NOW)  # the first segment is wholly below the log start
    assert log.log_start_offset == 5
    assert set(log.producer_state.producers) == {1, 3}  # 2's last batch went; 1 has an open transaction
    assert log.last_stable_offset == 0  # producer 1's transaction still holds it back
    end(log, 1, committed=False)  # its abort marker still finds the transaction
    assert log.last_stable_offset == log.high_watermark
    assert log.aborted_transactions(5, log.log_end_offset) == [AbortedTxn(1, 0, 10, 11)]
    log.close()
    reopened = Log(log_dir, LogConfig(segment_bytes=3 * BATCH + 1), log_start_offset=5)
    assert reopened.log_start_offset == 5
    # loading applies the rule again: 2 came back from the snapshot, 1's transaction is over now
    assert set(reopened.producer_state.producers) == {3}
    reopened.close()
