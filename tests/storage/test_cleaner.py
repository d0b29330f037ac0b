"""The log cleaner on real segment files: what a pass keeps, and how a crash around the swap recovers."""

import shutil

import pytest
from storage_support import append

from protocol.records import build_batch, iter_records
from storage.cleaner import LogCleaner
from storage.config import LogConfig
from storage.log import Log
from storage.log_manager import LogManager
from storage.txn_index import AbortedTxn

NOW = 10_000_000
SEGMENT = 3 * len(build_batch([(b"k0", b"v-000")], timestamp_ms=NOW)) + 1  # three one-record batches each


def keyed(key: bytes, value: bytes | None, ts: int = NOW, **producer) -> bytes:
    return build_batch([(key, value)], timestamp_ms=ts, **producer)


def contents(log: Log) -> list[tuple[int, bytes, bytes | None]]:
    return [(r.offset, r.key, r.value) for _, batch in log.batches() for r in iter_records(batch)]


@pytest.fixture
def manager(tmp_path):
    logs = LogManager(tmp_path / "data", LogConfig())
    logs.load()
    yield logs
    logs.close()


def compacted(manager, **configs) -> Log:
    manager.create_topic("t", 1, {"cleanup.policy": "compact", "segment.bytes": str(SEGMENT),
                                  "min.cleanable.dirty.ratio": "0", **configs})
    return manager.log("t", 0)


def run_pass(manager) -> int:
    cleaner = LogCleaner(manager, 1e12)
    plan = cleaner.choose(NOW)
    assert plan is not None
    return cleaner.swap(cleaner.clean(plan))


def test_a_pass_keeps_the_latest_record_per_key_at_its_offset(manager):
    log = compacted(manager)
    for i in range(4):
        for key in (b"a", b"b", b"c"):
            append(log, keyed(key, b"%s-%d" % (key, i)), now_ms=NOW)
    append(log, keyed(b"b", None), now_ms=NOW)  # 12: a tombstone for b
    append(log, keyed(b"z", b"filler"), now_ms=NOW)  # 13, 14: past the cleaned part
    append(log, keyed(b"z", b"filler"), now_ms=NOW)
    assert len(log.segments) == 5
    assert run_pass(manager) == 3  # the segment from 9 on holds only latest records
    # the active segment (from 12 on) is not cleaned, so its tombstone does not count yet
    assert contents(log) == [(9, b"a", b"a-3"), (10, b"b", b"b-3"), (11, b"c", b"c-3"), (12, b"b", None),
                             (13, b"z", b"filler"), (14, b"z", b"filler")]
    assert manager.first_dirty_offsets[("t", 0)] == 12
    assert [s.base_offset for s in log.segments] == [0, 3, 6, 9, 12]
    assert log.read(0, 1 << 20)  # reads from the first offset find the first kept batch


def test_aborted_records_go_and_tombstones_go_after_delete_retention(manager):
    log = compacted(manager, **{"delete.retention.ms": "1000"})
    old = NOW - 5000
    append(log, keyed(b"b", None, old), now_ms=NOW)  # 0: a tombstone past delete.retention.ms
    append(log, keyed(b"a", b"a-1", old), now_ms=NOW)  # 1
    append(log, keyed(b"a", b"aborted", old, producer_id=7, producer_epoch=0, base_sequence=0, transactional=True),
           now_ms=NOW)  # 2
    log.append_marker(7, 0, 0, committed=False, now_ms=NOW)  # 3, second segment
    append(log, keyed(b"c", b"c-1", old, producer_id=8, producer_epoch=0, base_sequence=0, transactional=True),
           now_ms=NOW)  # 4
    log.append_marker(8, 0, 0, committed=True, now_ms=NOW)  # 5
    append(log, keyed(b"z", b"filler"), now_ms=NOW)  # 6: the active segment
    run_pass(manager)
    kept = contents(log)
    assert (2, b"a", b"aborted") not in kept and (0, b"b", None) not in kept
    assert (1, b"a", b"a-1") in kept and (4, b"c", b"c-1") in kept
    # producer 7's last batch stays, emptied: its state can still be rebuilt from the log
    assert [(h.base_offset, h.records_count) for h, _ in log.batches() if h.producer_id == 7 and not h.is_control] \
        == [(2, 0)]
    # its abort marker's segment is younger than delete.retention.ms: the marker stays for now
    assert any(h.is_control and h.producer_id == 7 for h, _ in log.batches())


def test_a_crash_before_the_swap_leaves_the_old_segment_and_after_it_the_new(manager, tmp_path):
    log = compacted(manager)
    for i in range(3):
        append(log, keyed(b"a", b"a-%d" % i), now_ms=NOW)
    append(log, keyed(b"z", b"filler"), now_ms=NOW)
    before = contents(log)
    cleaner = LogCleaner(manager, 1e12)
    plan = cleaner.clean(cleaner.choose(NOW))
    ((source, cleaned),) = plan.cleaned
    manager.close()

    # crashed with the cleaned file written but not yet renamed: the old segment stays
    unfinished = shutil.copytree(log.directory, tmp_path / "unfinished" / "t-0")
    reopened = Log(unfinished, LogConfig())
    assert contents(reopened) == before
    assert any("discarded the unfinished cleaning of 00000000000000000000.log" in r for r in reopened.repairs)
    assert not list(unfinished.glob("*.cleaned"))
    reopened.close()

    # crashed after the rename to .swap (the commit point): the start completes the swap
    swapped = shutil.copytree(log.directory, tmp_path / "swapped" / "t-0")
    (swapped / cleaned.name).rename(swapped / (source.path.name + ".swap"))
    reopened = Log(swapped, LogConfig(), needs_recovery=True)
    assert contents(reopened) == [(2, b"a", b"a-2"), (3, b"z", b"filler")]
    assert any("completed the swap of the cleaned 00000000000000000000.log" in r for r in reopened.repairs)
    reopened.close()


def test_markers_go_once_their_transactions_have_no_batch_left(manager):
    log = compacted(manager, **{"delete.retention.ms": "1000", "segment.bytes": "1000"})
    old = NOW - 5000

    def txn(pid: int, seq: int, key: bytes, value: bytes) -> None:
        append(log, keyed(key, value, old, producer_id=pid, producer_epoch=0, base_sequence=seq, transactional=True),
               now_ms=old)

    txn(7, 0, b"a", b"aborted")  # 0
    log.append_marker(7, 0, 0, committed=False, now_ms=old)  # 1
    txn(7, 1, b"b", b"b-1")  # 2: producer 7's last batch
    log.append_marker(7, 0, 0, committed=True, now_ms=old)  # 3
    txn(8, 0, b"c", b"c-1")  # 4, superseded by 6
    log.append_marker(8, 0, 0, committed=True, now_ms=old)  # 5
    append(log, keyed(b"c", b"c-2", old), now_ms=old)  # 6
    txn(8, 1, b"d", b"d-1")  # 7: producer 8's last batch
    log.append_marker(8, 0, 0, committed=True, now_ms=old)  # 8
    append(log, keyed(b"z", b"f" * 900), now_ms=NOW)  # 9: rolls; the rest is one old segment
    assert [s.base_offset for s in log.segments] == [0, 9]
    assert log.aborted_transactions(0, 10) == [AbortedTxn(7, 0, 1, 2)]

    run_pass(manager)
    batches = [(h.base_offset, h.is_control) for h, _ in log.batches()]
    # 0 aborted, 1 its abort marker and 5 the marker of a transaction compacted away are gone;
    # the markers of 7's and 8's last transactions stay with their last batches
    assert batches == [(2, False), (3, True), (6, False), (7, False), (8, True), (9, False)]
    assert log.aborted_transactions(0, 10) == []  # the abort marker took its index entry along
    manager.close()
    reopened = Log(log.directory, LogConfig())
    assert reopened.aborted_transactions(0, 10) == []
    assert [(h.base_offset, h.is_control) for h, _ in reopened.batches()] == batches
    reopened.close()


def test_a_crash_around_the_swap_keeps_a_segment_and_its_transaction_index_together(manager, tmp_path):
    log = compacted(manager, **{"delete.retention.ms": "1000", "segment.bytes": "1000"})
    old = NOW - 5000
    append(log, keyed(b"a", b"aborted", old, producer_id=7, producer_epoch=0, base_sequence=0, transactional=True),
           now_ms=old)  # 0
    log.append_marker(7, 0, 0, committed=False, now_ms=old)  # 1
    append(log, keyed(b"b", b"b-1", old, producer_id=7, producer_epoch=0, base_sequence=1), now_ms=old)  # 2
    append(log, keyed(b"z", b"f" * 900), now_ms=NOW)  # 3: rolls
    cleaner = LogCleaner(manager, 1e12)
    plan = cleaner.clean(cleaner.choose(NOW))
    ((source, cleaned),) = plan.cleaned
    manager.close()
    txn_index = source.segment.txn_index.path.name

    # the transaction index was renamed to .swap, the log not yet: nothing changed
    before = shutil.copytree(log.directory, tmp_path / "before" / "t-0")
    (before / (txn_index + ".cleaned")).rename(before / (txn_index + ".swap"))
    reopened = Log(before, LogConfig())
    assert reopened.aborted_transactions(0, 4) == [AbortedTxn(7, 0, 1, 2)]
    assert [h.base_offset for h, _ in reopened.batches()] == [0, 1, 2, 3]
    assert not list(before.glob("*.swap")) and not list(before.glob("*.cleaned"))
    reopened.close()

    # both renamed: the start completes the swap of the segment and its index together
    after = shutil.copytree(log.directory, tmp_path / "after" / "t-0")
    (after / (txn_index + ".cleaned")).rename(after / (txn_index + ".swap"))
    (after / cleaned.name).rename(after / (source.path.name + ".swap"))
    reopened = Log(after, LogConfig())
    assert reopened.aborted_transactions(0, 4) == []
    assert [h.base_offset for h, _ in reopened.batches()] == [2, 3]
    reopened.close()


def test_a_dirty_part_with_more_keys_than_the_map_holds_takes_several_passes(manager):
    log = compacted(manager)
    for key in (b"a", b"b", b"c", b"d", b"e", b"f"):  # two segments of three keys, then two more
        append(log, keyed(key, key + b"-1"), now_ms=NOW)
    for key in (b"a", b"b", b"c"):
        append(log, keyed(key, key + b"-2"), now_ms=NOW)
    append(log, keyed(b"z", b"filler"), now_ms=NOW)  # 9: the active segment
    cleaner = LogCleaner(manager, 1e12, max_keys=4)
    plan = cleaner.clean(cleaner.choose(NOW))
    assert plan.end == 3  # the second segment's keys would not fit beside the first's
    cleaner.swap(plan)
    assert manager.first_dirty_offsets[("t", 0)] == 3
    plan = cleaner.clean(cleaner.choose(NOW))
    assert (plan.first_dirty, plan.end) == (3, 6)
    cleaner.swap(plan)
    plan = cleaner.clean(cleaner.choose(NOW))
    cleaner.swap(plan)
    assert plan.end == 9
    assert contents(log) == [(3, b"d", b"d-1"), (4, b"e", b"e-1"), (5, b"f", b"f-1"), (6, b"a", b"a-2"),
                             (7, b"b", b"b-2"), (8, b"c", b"c-2"), (9, b"z", b"filler")]
