import errno
import os
import uuid

import pytest
from storage_support import append, crash_copy, make_batch, split_batches, spread_timestamps, values

from protocol.records import TIMESTAMP_TYPE_BIT, check_batch, read_header
from storage.config import LogConfig
from storage.errors import OffsetOutOfRange, RecordBatchTooLarge
from storage.log import Log

BATCH = len(make_batch(3))  # every make_batch(3, ...) has this size


def small_config(**overrides) -> LogConfig:
    """Segments of about ten three-record batches, index entries every two or so."""
    settings = {"segment_bytes": 10 * BATCH + 5, "index_interval_bytes": 2 * BATCH - 1}
    return LogConfig(**{**settings, **overrides})


@pytest.fixture
def log_dir(tmp_path):
    return tmp_path / "orders-0"


def fill(log, batches, records=3, first_ts=1_000, per_call=1):
    """Append ``batches`` batches of ``records`` records, ``per_call`` per append, timestamps rising by 10."""
    tags = range(batches)
    for start in range(0, batches, per_call):
        append(log, *(make_batch(records, first_ts + 10 * t, tag=t) for t in tags[start : start + per_call]))


def test_offsets_are_contiguous_across_batches_and_segment_rolls(log_dir):
    log = Log(log_dir, small_config())
    results = [append(log, make_batch(3, tag=i), make_batch(2, tag=i)) for i in range(25)]
    assert results == [(5 * i, 5 * i + 4) for i in range(25)]
    assert log.log_end_offset == log.high_watermark == 125
    assert len(log.segments) > 3
    assert [s.base_offset for s in log.segments] == sorted({s.base_offset for s in log.segments})
    for segment in log.segments:
        assert segment.size <= log.config.segment_bytes
    expected = 0
    for hdr, data in log.batches():
        assert hdr.base_offset == expected
        check_batch(data, 0, read_header(data))
        expected = hdr.next_offset
    assert expected == 125
    log.close()


def test_every_offset_reads_back_the_batch_holding_it(log_dir):
    log = Log(log_dir, small_config())
    fill(log, 40, per_call=3)
    for offset in range(120):
        first = split_batches(log.read(offset, 1))[0]
        assert first.base_offset <= offset <= first.last_offset
    assert values(log.read(30, 1))[0] == b"10:".ljust(10, b"x")
    log.close()


def test_log_end_offset_counts_every_record_of_the_last_batch(log_dir):
    log = Log(log_dir, small_config())
    assert log.log_end_offset == 0
    assert append(log, make_batch(7)) == (0, 6)
    assert log.log_end_offset == 7
    assert append(log, make_batch(1), make_batch(12)) == (7, 19)
    assert log.log_end_offset == 20
    log.close()


def test_read_respects_max_bytes_with_whole_batches(log_dir):
    log = Log(log_dir, LogConfig())
    fill(log, 10)
    assert [h.base_offset for h in split_batches(log.read(0, 3 * BATCH))] == [0, 3, 6]
    assert [h.base_offset for h in split_batches(log.read(0, 3 * BATCH - 1))] == [0, 3]
    assert [h.base_offset for h in split_batches(log.read(4, 2 * BATCH))] == [3, 6]  # starts before the offset
    log.close()


def test_a_sequential_reader_after_truncation_gets_the_new_batches(log_dir):
    """Where a read ended is remembered for the reader's next read; a truncation forgets it, so the
    batches appended since are found, not whatever now lies at the remembered position."""
    log = Log(log_dir, LogConfig())
    fill(log, 4)
    assert [h.base_offset for h in split_batches(log.read(0, 2 * BATCH))] == [0, 3]
    assert [h.base_offset for h in split_batches(log.read(6, 2 * BATCH))] == [6, 9]  # from where it ended
    log.truncate_to(0)
    append(log, make_batch(10, tag=7))
    data = log.read(6, 10 * BATCH)
    assert [(h.base_offset, h.next_offset) for h in split_batches(data)] == [(0, 10)]
    assert values(data)[0].startswith(b"7:")
    log.close()


def test_read_returns_a_first_batch_larger_than_max_bytes(log_dir):
    log = Log(log_dir, LogConfig())
    append(log, make_batch(3, value_size=5_000))
    fill(log, 2)
    data = log.read(0, 100)
    assert [h.base_offset for h in split_batches(data)] == [0]
    assert len(data) > 15_000
    assert log.read(0, 100, min_one=False) == b"", "only the first partition of a fetch may exceed its limit"
    assert log.read_committed(0, 100, min_one=False) == (b"", [])
    log.close()


def test_read_never_returns_batches_at_or_past_max_offset(log_dir):
    log = Log(log_dir, LogConfig())
    fill(log, 10)
    assert [h.base_offset for h in split_batches(log.read(0, 10**6, max_offset=9))] == [0, 3, 6]
    assert [h.base_offset for h in split_batches(log.read(0, 10**6, max_offset=10))] == [0, 3, 6, 9]
    assert log.read(9, 10**6, max_offset=9) == b""
    log.close()


def test_read_at_the_log_end_is_empty_and_outside_the_log_is_out_of_range(log_dir):
    log = Log(log_dir, LogConfig())
    fill(log, 2)
    assert log.read(6, 100) == b""
    with pytest.raises(OffsetOutOfRange):
        log.read(7, 100)
    with pytest.raises(OffsetOutOfRange):
        log.read(-1, 100)
    log.close()


def test_read_stops_at_the_end_of_a_segment_and_continues_from_the_next(log_dir):
    log = Log(log_dir, small_config())
    fill(log, 25)
    second = log.segments[1].base_offset
    data = log.read(0, 10**6)
    assert split_batches(data)[-1].next_offset == second
    assert split_batches(log.read(second, 10**6))[0].base_offset == second
    log.close()


def test_log_append_time_stamps_batches_and_keeps_crc_valid(tmp_path):
    log = Log(tmp_path / "stamped-0", LogConfig(message_timestamp_type="LogAppendTime"))
    append(log, make_batch(2, timestamp_ms=5), make_batch(3, timestamp_ms=6), now_ms=777_000)
    for hdr in split_batches(log.read(0, 10**6)):  # split_batches checks the CRC
        assert hdr.attributes & TIMESTAMP_TYPE_BIT
        assert hdr.max_timestamp == 777_000
    assert log.max_timestamp() == (0, 777_000)
    log.close()


def test_create_time_batches_are_stored_as_sent_but_for_the_offset(log_dir):
    log = Log(log_dir, LogConfig())
    batch = make_batch(2, timestamp_ms=5)
    append(log, make_batch(1), now_ms=777_000)
    append(log, batch, now_ms=777_000)
    stored = log.read(1, 10**6)
    assert stored[8:] == batch[8:]
    assert read_header(stored).base_offset == 1
    log.close()


def test_offset_for_timestamp_finds_the_first_batch_reaching_it(log_dir):
    log = Log(log_dir, small_config())
    # Timestamps are not ordered with CreateTime: 0..24 rise, then one late batch.
    fill(log, 25)  # batch i at offset 3i with timestamp 1000 + 10i
    append(log, make_batch(3, timestamp_ms=1_005))
    assert log.offset_for_timestamp(0) == (0, 1_000)
    assert log.offset_for_timestamp(1_000) == (0, 1_000)
    assert log.offset_for_timestamp(1_001) == (3, 1_010)
    assert log.offset_for_timestamp(1_125) == (39, 1_130)
    assert log.offset_for_timestamp(1_240) == (72, 1_240)
    assert log.offset_for_timestamp(1_241) is None
    assert log.max_timestamp() == (72, 1_240)
    log.close()


def test_timestamp_lookups_narrow_down_to_the_record(log_dir):
    log = Log(log_dir, LogConfig())
    append(log, make_batch(1, timestamp_ms=100))
    append(log, spread_timestamps(make_batch(3, timestamp_ms=300), [0, 50, 20]))
    append(log, make_batch(1, timestamp_ms=320))
    assert log.offset_for_timestamp(250) == (1, 300)
    assert log.offset_for_timestamp(301) == (2, 350)
    assert log.offset_for_timestamp(330) == (2, 350)
    assert log.offset_for_timestamp(351) is None
    assert log.max_timestamp() == (2, 350)
    log.close()


def test_max_timestamp_of_an_empty_log_is_none(log_dir):
    log = Log(log_dir, LogConfig())
    assert log.max_timestamp() is None
    assert log.offset_for_timestamp(0) is None
    log.close()


def test_reopen_after_clean_close_keeps_everything(log_dir):
    log = Log(log_dir, small_config())
    fill(log, 33, per_call=2)
    before = [log.read(o, 10**6) for o in range(0, 99, 7)]
    segments = [s.base_offset for s in log.segments]
    log.close()
    reopened = Log(log_dir, small_config())
    assert reopened.repairs == []
    assert reopened.log_end_offset == 99
    assert [s.base_offset for s in reopened.segments] == segments
    assert [reopened.read(o, 10**6) for o in range(0, 99, 7)] == before
    assert reopened.offset_for_timestamp(1_200) == (60, 1_200)
    assert append(reopened, make_batch(3)) == (99, 101)
    reopened.close()


def test_crash_with_a_torn_tail_truncates_to_the_valid_prefix(log_dir, tmp_path):
    log = Log(log_dir, small_config())
    fill(log, 8)
    crashed = crash_copy(log_dir, tmp_path / "copy" / "orders-0")
    log.close()
    last = sorted(crashed.glob("*.log"))[-1]
    os.truncate(last, last.stat().st_size - 7)  # the last batch was only partly written
    recovered = Log(crashed, small_config(), needs_recovery=True)
    assert recovered.log_end_offset == 21
    assert "truncated" in recovered.repair_summary
    assert f"{BATCH - 7} bytes of {last.name} at offset 21" in recovered.repair_summary
    assert recovered.recovery_point == 21
    assert len(split_batches(recovered.read(0, 10**6))) == 7
    assert append(recovered, make_batch(3)) == (21, 23)
    recovered.close()


def test_corrupt_batch_in_a_middle_segment_drops_it_and_everything_after(log_dir, tmp_path):
    log = Log(log_dir, small_config())
    fill(log, 45)
    assert len(log.segments) >= 4
    second = log.segments[1]
    bad_offset = second.base_offset + 9  # the fourth batch of the second segment
    bad_position = second.find_position(bad_offset)[0]
    expected_before = log.read(0, 10**6)
    crashed = crash_copy(log_dir, tmp_path / "copy" / "orders-0")
    log.close()
    with open(crashed / second.name, "r+b") as f:  # flip one byte of a record value
        f.seek(bad_position + BATCH - 3)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0xFF]))
    later = sorted(p.name for p in crashed.glob("*.log"))[2:]
    recovered = Log(crashed, small_config(), needs_recovery=True)
    summary = recovered.repair_summary
    assert summary.startswith("orders-0: ")
    assert f"of {second.name} at offset {bad_offset} (CRC32C mismatch)" in summary
    assert f"deleted {len(later)} later segment(s)" in summary
    assert [s.base_offset for s in recovered.segments] == [0, second.base_offset]
    assert not any((crashed / name).exists() for name in later)
    assert recovered.log_end_offset == bad_offset
    assert recovered.read(0, 10**6) == expected_before  # the first segment is intact
    assert [h.base_offset for h in split_batches(recovered.read(second.base_offset, 10**6))] == [
        second.base_offset + 3 * i for i in range(3)
    ]
    recovered.close()


def test_recovery_starts_at_the_segment_holding_the_recovery_point(log_dir, tmp_path):
    log = Log(log_dir, small_config())
    fill(log, 25)
    log.flush()
    flushed = log.recovery_point
    fill(log, 5)
    crashed = crash_copy(log_dir, tmp_path / "copy" / "orders-0")
    log.close()
    first = crashed / "00000000000000000000.log"
    data = bytearray(first.read_bytes())
    data[BATCH - 3] ^= 0xFF  # damage below the recovery point is not looked for, as in Kafka
    first.write_bytes(bytes(data))
    last = sorted(crashed.glob("*.log"))[-1]
    os.truncate(last, last.stat().st_size - 1)
    recovered = Log(crashed, small_config(), recovery_point=flushed, needs_recovery=True)
    assert "00000000000000000000.log" not in recovered.repair_summary
    assert last.name in recovered.repair_summary
    assert recovered.log_end_offset == 87
    recovered.close()


def test_missing_and_garbage_index_files_are_rebuilt(log_dir):
    log = Log(log_dir, small_config())
    fill(log, 30)
    expected = [log.read(o, 1) for o in range(90)]
    segments = [s.name[:-4] for s in log.segments]
    log.close()
    (log_dir / f"{segments[0]}.index").unlink()
    (log_dir / f"{segments[1]}.timeindex").write_bytes(b"\x01" * 13)
    (log_dir / f"{segments[2]}.index").write_bytes(b"\x00\x00\x00\x05\x00\x00\x00\x07")  # mid-batch position
    reopened = Log(log_dir, small_config())
    summary = reopened.repair_summary
    assert f"rebuilt {segments[0]}.index (missing)" in summary
    assert f"rebuilt {segments[1]}.timeindex" in summary
    assert f"rebuilt {segments[2]}.index" in summary
    assert [reopened.read(o, 1) for o in range(90)] == expected
    assert reopened.offset_for_timestamp(1_150) == (45, 1_150)
    reopened.close()
    assert Log(log_dir, small_config()).repairs == []  # the rebuilt files were written


def test_failed_write_leaves_the_log_consistent(log_dir, tmp_path, monkeypatch):
    log = Log(log_dir, small_config())
    fill(log, 4)
    size = log.size_bytes

    real_pwrite = os.pwrite

    def no_space(fd, data, position):
        real_pwrite(fd, bytes(data)[:20], position)  # some bytes land before the disk fills up
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "pwrite", no_space)
    with pytest.raises(OSError):
        append(log, make_batch(3), make_batch(3))
    monkeypatch.undo()
    assert log.log_end_offset == 12
    assert log.size_bytes == size
    assert append(log, make_batch(3)) == (12, 14)
    crashed = crash_copy(log_dir, tmp_path / "copy" / "orders-0")
    log.close()
    recovered = Log(crashed, small_config(), needs_recovery=True)
    assert recovered.repairs == []
    assert recovered.log_end_offset == 15
    recovered.close()


def test_segments_roll_when_older_than_segment_ms(log_dir):
    log = Log(log_dir, LogConfig(segment_ms=1_000), now_ms=0)
    append(log, make_batch(3, timestamp_ms=0), now_ms=0)
    append(log, make_batch(3, timestamp_ms=500), now_ms=500)
    assert len(log.segments) == 1
    append(log, make_batch(3, timestamp_ms=1_001), now_ms=1_001)
    assert [s.base_offset for s in log.segments] == [0, 6]
    log.close()


def test_old_timestamps_do_not_roll_a_segment_per_append(log_dir):
    """The roll compares the incoming batch's timestamp with the segment's first, as Kafka does:
    batches stamped CreateTime=1 on a broker whose clock is far ahead stay in one segment."""
    log = Log(log_dir, LogConfig(segment_ms=1_000), now_ms=10_000_000)
    for i in range(20):
        append(log, make_batch(1, timestamp_ms=1), now_ms=10_000_000 + i)
    assert len(log.segments) == 1
    append(log, make_batch(1, timestamp_ms=1_002), now_ms=10_000_100)  # 1,001 ms after the first batch
    assert [s.base_offset for s in log.segments] == [0, 20]
    log.close()


def test_a_batch_larger_than_a_segment_is_refused(log_dir):
    log = Log(log_dir, LogConfig(segment_bytes=BATCH))
    with pytest.raises(RecordBatchTooLarge):
        append(log, make_batch(4))
    assert log.log_end_offset == 0
    log.close()


def test_flush_messages_moves_the_recovery_point(log_dir):
    log = Log(log_dir, LogConfig(flush_interval_messages=7))
    append(log, make_batch(3))
    assert log.recovery_point == 0
    append(log, make_batch(3))
    assert log.recovery_point == 0
    append(log, make_batch(3))  # 9 unflushed records >= 7
    assert log.recovery_point == 9
    log.close()


def test_flush_if_due_follows_flush_ms(log_dir):
    log = Log(log_dir, LogConfig(flush_interval_ms=100), now_ms=0)
    append(log, make_batch(3), now_ms=10)
    assert not log.flush_if_due(99)
    assert log.flush_if_due(100)
    assert log.recovery_point == 3
    assert not log.flush_if_due(1_000)  # nothing new to flush
    log.close()


def test_truncate_to_drops_the_batch_holding_the_offset_and_all_after(log_dir):
    log = Log(log_dir, small_config())
    fill(log, 30)
    log.truncate_to(40)  # inside the batch 39..41
    assert log.log_end_offset == 39
    assert split_batches(log.read(36, 10**6))[-1].next_offset == 39
    assert append(log, make_batch(3)) == (39, 41)
    log.truncate_to(0)
    assert (log.log_start_offset, log.log_end_offset, len(log.segments)) == (0, 0, 1)
    log.close()


def test_truncating_at_the_end_forgets_an_epoch_begun_there_and_tells_the_watchers(log_dir):
    """A replica led epoch 3 from its log end and lost the leadership before writing in it. As a follower it
    names its last epoch to the new leader, which answers that its epoch 0 ended at that very offset: the
    cut removes no record, but epoch 3 must go -- and the replica fetcher, watching the log, must hear of it,
    or it names epoch 3 again and gets the same answer forever (the chaos loop's ISR that never refilled)."""
    log = Log(log_dir, small_config())
    fill(log, 4)
    end = log.log_end_offset
    log.leader_epochs.assign(3, end)
    told = []
    log.watchers["fetcher"] = lambda: told.append(log.leader_epochs.latest_epoch)
    log.truncate_to(end)
    assert log.log_end_offset == end
    assert log.leader_epochs.latest_epoch == 0
    assert told == [0]
    log.truncate_to(end)  # nothing left to forget: nothing to tell
    assert told == [0]
    log.close()


def test_partition_metadata_holds_the_topic_id(tmp_path):
    topic_id = uuid.uuid4()
    log = Log(tmp_path / "t-3", LogConfig(), topic_id=topic_id)
    text = (tmp_path / "t-3" / "partition.metadata").read_text()
    assert text.splitlines()[0] == "version: 0"
    assert text.splitlines()[1].startswith("topic_id: ")
    log.close()
    assert Log(tmp_path / "t-3", LogConfig()).topic_id == topic_id
