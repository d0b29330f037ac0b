"""Retention's decisions (storage/log.py, Broker.delete_old_segments) by the fake clock's wall time: which
segments retention.ms and retention.bytes delete, which they never touch, and when the files go."""

from __future__ import annotations

from types import SimpleNamespace

from broker.broker import Broker
from protocol.records import build_batch
from storage import clock

from .conftest import append

HOUR_MS = 3_600_000
BATCH = len(build_batch([(b"k", b"v" * 20)], timestamp_ms=0))


def topic(logs, **configs):
    """A topic whose every batch fills a segment of its own: n batches, n segments, the last one active."""
    settings = {"segment.bytes": str(BATCH), **{k.replace("_", "."): str(v) for k, v in configs.items()}}
    logs.create_topic("t", 1, settings)
    return logs.log("t", 0)


def produce(log, count=1, age_ms=0) -> None:
    """``count`` batches stamped ``age_ms`` before the clock's now."""
    for _ in range(count):
        now = clock.wall_ms()
        append(log, build_batch([(b"k", b"v" * 20)], timestamp_ms=now - age_ms), now_ms=now)


def bases(log) -> list[int]:
    return [s.base_offset for s in log.segments]


def test_segments_older_than_retention_ms_are_deleted_by_the_clock(logs, fake_clock):
    log = topic(logs, retention_ms=HOUR_MS)
    produce(log, 3)
    fake_clock.advance(HOUR_MS / 1000)
    produce(log, 2)
    assert logs.delete_old_segments(clock.wall_ms()) == [], "exactly retention.ms old: kept"
    fake_clock.advance(0.001)
    deleted = logs.delete_old_segments(clock.wall_ms())
    assert bases(log) == [3, 4] and log.log_start_offset == 3
    assert sorted(p.name for _, files in deleted for p in files if p.name.endswith(".log.deleted")) == [
        "00000000000000000000.log.deleted", "00000000000000000001.log.deleted", "00000000000000000002.log.deleted"]


def test_the_active_segment_is_never_deleted_however_old(logs, fake_clock):
    log = topic(logs, retention_ms=1000)
    produce(log, 2)
    fake_clock.advance(3600)
    logs.delete_old_segments(clock.wall_ms())
    assert bases(log) == [1], "the active segment (the last batch) stays"
    assert log.log_start_offset == 1 and log.log_end_offset == 2


def test_a_segment_goes_only_once_its_newest_record_is_past_retention(logs, fake_clock):
    log = topic(logs, retention_ms=HOUR_MS, segment_bytes=3 * BATCH)
    produce(log, 1, age_ms=2 * HOUR_MS)
    produce(log, 1)  # a recent record in the same segment keeps it
    produce(log, 1, age_ms=2 * HOUR_MS)
    produce(log, 1)
    logs.delete_old_segments(clock.wall_ms())
    assert bases(log)[0] == 0
    fake_clock.advance(HOUR_MS / 1000 + 1)
    logs.delete_old_segments(clock.wall_ms())
    assert bases(log)[0] == 3


def test_retention_deletes_nothing_at_or_above_the_high_watermark(logs, fake_clock):
    log = topic(logs, retention_ms=1000)
    produce(log, 4)
    log.set_high_watermark(2)  # only 0 and 1 are committed
    fake_clock.advance(10)
    logs.delete_old_segments(clock.wall_ms())
    assert bases(log) == [2, 3], "only segments wholly below the high watermark go"


def test_retention_ms_minus_one_keeps_everything(logs, fake_clock):
    log = topic(logs, retention_ms=-1)
    produce(log, 3, age_ms=10 ** 9)
    logs.delete_old_segments(clock.wall_ms())
    assert bases(log) == [0, 1, 2]


def test_retention_bytes_deletes_the_oldest_segments_while_the_log_is_over(logs, fake_clock):
    log = topic(logs, retention_ms=-1, retention_bytes=2 * BATCH + BATCH // 2)
    produce(log, 5)
    logs.delete_old_segments(clock.wall_ms())
    assert bases(log) == [2, 3, 4], "2.5 batches too many: 2 go (a third would leave the log under)"


def test_retention_bytes_never_takes_a_segment_that_would_leave_the_log_under(logs, fake_clock):
    log = topic(logs, retention_ms=-1, retention_bytes=4 * BATCH - 1)
    produce(log, 4)
    logs.delete_old_segments(clock.wall_ms())
    assert bases(log) == [0, 1, 2, 3], "one byte over is less than a segment: nothing goes"


def test_a_compacted_topic_has_no_time_retention(logs, fake_clock):
    log = topic(logs, retention_ms=1000, cleanup_policy="compact")
    produce(log, 3, age_ms=10 ** 9)
    logs.delete_old_segments(clock.wall_ms())
    assert bases(log) == [0, 1, 2]


def test_compact_and_delete_topics_have_time_retention(logs, fake_clock):
    log = topic(logs, retention_ms=1000, cleanup_policy="compact,delete")
    produce(log, 3, age_ms=10 ** 9)
    logs.delete_old_segments(clock.wall_ms())
    assert bases(log) == [2]


def test_delete_records_removes_whole_segments_below_the_log_start_under_any_policy(logs, fake_clock):
    log = topic(logs, cleanup_policy="compact")
    produce(log, 4)
    logs.delete_records("t", 0, 2)
    logs.delete_old_segments(clock.wall_ms())
    assert bases(log) == [2, 3] and log.log_start_offset == 2


def test_deleted_files_are_removed_after_file_delete_delay_ms(logs, fake_clock):
    log = topic(logs, retention_ms=1000, file_delete_delay_ms=60_000)
    produce(log, 2)
    fake_clock.advance(10)
    Broker.delete_old_segments(SimpleNamespace(logs=logs), clock.wall_ms())
    renamed = sorted(log.directory.glob("*.deleted"))
    assert renamed, "renamed at once"
    fake_clock.advance(59.9)
    assert all(p.exists() for p in renamed)
    fake_clock.advance(0.1)
    assert not any(p.exists() for p in renamed)


def test_a_segment_rolls_after_segment_ms_by_the_clock(logs, fake_clock):
    log = topic(logs, segment_bytes=1 << 20, segment_ms=HOUR_MS)
    produce(log, 2)
    fake_clock.advance(HOUR_MS / 1000 - 1)
    produce(log, 1)
    assert bases(log) == [0]
    fake_clock.advance(2)
    produce(log, 1)
    assert bases(log) == [0, 3]
