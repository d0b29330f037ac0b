"""Which log the cleaner cleans next, and which part of it (storage/cleaner.py's choose), by the fake
clock's wall time: min.cleanable.dirty.ratio, min/max.compaction.lag.ms, delete.retention.ms."""

from __future__ import annotations

from protocol.records import build_batch, iter_records
from storage import clock
from storage.cleaner import LogCleaner

from .conftest import append

BATCH = len(build_batch([(b"k0", b"v" * 20)], timestamp_ms=0))
HOUR_MS = 3_600_000


def compacted(logs, name="t", **configs):
    """A compacted topic whose every batch is a segment of its own (the last one active)."""
    logs.create_topic(name, 1, {"cleanup.policy": "compact", "segment.bytes": str(BATCH),
                                **{k.replace("_", "."): str(v) for k, v in configs.items()}})
    return logs.log(name, 0)


def produce(log, *keys: bytes, age_ms: int = 0) -> None:
    for key in keys:
        now = clock.wall_ms()
        append(log, build_batch([(key, b"v" * 20)], timestamp_ms=now - age_ms), now_ms=now)


def clean(logs, cleaner) -> None:
    plan = cleaner.choose(clock.wall_ms())
    cleaner.swap(cleaner.clean(plan))
    cleaner.busy.discard(plan.key)


def test_a_log_below_min_cleanable_dirty_ratio_is_not_cleaned(logs, fake_clock):
    log = compacted(logs, min_cleanable_dirty_ratio=0.5)
    produce(log, b"k0", b"k1", b"k2", b"k3", b"k4")
    cleaner = LogCleaner(logs, 1e12)
    clean(logs, cleaner)  # all four closed segments dirty (ratio 1): cleaned, first dirty now 4
    produce(log, b"k5")  # one dirty segment of five: 0.2
    assert cleaner.choose(clock.wall_ms()) is None
    produce(log, b"k6", b"k7", b"k8")
    assert cleaner.choose(clock.wall_ms()) is not None


def test_the_dirtiest_log_is_chosen_first_and_a_busy_one_is_skipped(logs, fake_clock):
    a = compacted(logs, "a", min_cleanable_dirty_ratio=0)
    b = compacted(logs, "b", min_cleanable_dirty_ratio=0)
    produce(a, b"k0", b"k1", b"k2")
    produce(b, b"k0", b"k1", b"k2")
    cleaner = LogCleaner(logs, 1e12)
    clean(logs, cleaner)  # one of them, entirely
    produce(a, b"k3", b"k4")
    produce(b, b"k3", b"k4")
    cleaned_first = "a" if logs.first_dirty_offsets.get(("a", 0)) else "b"
    produce(logs.log(cleaned_first, 0), b"k5")
    plan = cleaner.choose(clock.wall_ms())
    assert plan.key[0] != cleaned_first, "the never-cleaned log is all dirty: ratio 1"
    again = cleaner.choose(clock.wall_ms())
    assert again is not None and again.key[0] == cleaned_first, "the first is busy: the other one"
    assert cleaner.choose(clock.wall_ms()) is None


def test_min_compaction_lag_keeps_recent_segments_out_of_the_pass(logs, fake_clock):
    log = compacted(logs, min_cleanable_dirty_ratio=0, min_compaction_lag_ms=HOUR_MS)
    produce(log, b"k0", b"k1", age_ms=2 * HOUR_MS)
    produce(log, b"k2", b"k3")
    plan = LogCleaner(logs, 1e12).choose(clock.wall_ms())
    assert [s.segment.base_offset for s in plan.sources] == [0, 1] and plan.end == 2


def test_nothing_is_cleanable_before_min_compaction_lag_passes(logs, fake_clock):
    log = compacted(logs, min_cleanable_dirty_ratio=0, min_compaction_lag_ms=HOUR_MS)
    produce(log, b"k0", b"k1", b"k2")
    cleaner = LogCleaner(logs, 1e12)
    assert cleaner.choose(clock.wall_ms()) is None
    fake_clock.advance(HOUR_MS / 1000)
    assert cleaner.choose(clock.wall_ms()) is not None


def test_max_compaction_lag_cleans_a_log_below_the_dirty_ratio(logs, fake_clock):
    log = compacted(logs, min_cleanable_dirty_ratio=0.99, max_compaction_lag_ms=HOUR_MS)
    produce(log, b"k0", b"k1", b"k2", b"k3")
    cleaner = LogCleaner(logs, 1e12)
    logs.first_dirty_offsets[("t", 0)] = 2  # half cleaned already
    assert cleaner.choose(clock.wall_ms()) is None
    fake_clock.advance(HOUR_MS / 1000 + 1)
    plan = cleaner.choose(clock.wall_ms())
    assert plan is not None and plan.first_dirty == 2


def test_a_pass_never_reaches_the_active_segment_or_past_the_high_watermark(logs, fake_clock):
    log = compacted(logs, min_cleanable_dirty_ratio=0)
    produce(log, b"k0", b"k1", b"k2", b"k3", b"k4")
    log.set_high_watermark(2)
    plan = LogCleaner(logs, 1e12).choose(clock.wall_ms())
    assert plan.end == 2 and [s.segment.base_offset for s in plan.sources] == [0, 1]


def test_a_log_not_compacted_is_never_chosen(logs, fake_clock):
    logs.create_topic("d", 1, {"segment.bytes": str(BATCH)})
    produce(logs.log("d", 0), b"k0", b"k0", b"k0")
    assert LogCleaner(logs, 1e12).choose(clock.wall_ms()) is None


def test_the_delete_horizon_is_delete_retention_ms_before_now(logs, fake_clock):
    log = compacted(logs, min_cleanable_dirty_ratio=0, delete_retention_ms=HOUR_MS)
    produce(log, b"k0", b"k1")
    plan = LogCleaner(logs, 1e12).choose(clock.wall_ms())
    assert plan.delete_horizon_ms == clock.wall_ms() - HOUR_MS


def test_a_tombstone_outlives_delete_retention_only_by_the_clock(logs, fake_clock):
    log = compacted(logs, min_cleanable_dirty_ratio=0, delete_retention_ms=HOUR_MS)
    produce(log, b"k0")
    now = clock.wall_ms()
    append(log, build_batch([(b"k0", None)], timestamp_ms=now), now_ms=now)
    produce(log, b"k1", b"k2")
    cleaner = LogCleaner(logs, 1e12)
    clean(logs, cleaner)
    values = [(r.key, r.value) for _, batch in log.batches() for r in iter_records(batch)]
    assert (b"k0", None) in values and (b"k0", b"v" * 20) not in values
    fake_clock.advance(HOUR_MS / 1000 + 1)
    produce(log, b"k3")
    logs.first_dirty_offsets[("t", 0)] = 0  # clean it all again
    clean(logs, cleaner)
    assert b"k0" not in [r.key for _, batch in log.batches() for r in iter_records(batch)]
