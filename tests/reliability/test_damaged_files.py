"""Files damaged while the broker is down, under a real workload.

Index files and producer-state snapshots can be rebuilt from the segments,
so damaging them must cost nothing: the workload of helpers.reliability.PLAN
runs through restarts that each find one kind of such damage, and `moldau
verify` must pass. Damage to the segments themselves loses what it hit: a
corrupt batch in the middle of a segment, or a torn last batch, must cost
exactly the records from that batch on in that partition -- nothing earlier,
nothing in other partitions -- and the broker must say so. A torn tail of
__transaction_state must cost no transaction its outcome.

(tests/integration/test_durability.py covers torn tails of a single
partition in detail; tests/storage covers each repair on its own.)
"""

from __future__ import annotations

import random
import re
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer

from broker.coordinator.internal_topics import partition_for
from helpers.groups import GROUP_BROKER
from helpers.kafka import create_topic, produce_one, producer
from helpers.reliability import (
    PARTITIONS,
    PLAN,
    TOPIC,
    WorkloadProcess,
    WorkloadRun,
    budget,
    journal_lines,
    record_result,
    wait_for,
)
from protocol.records import HEADER_SIZE, valid_prefix
from storage.checkpoint import read_offset_checkpoint
from verify.checker import verify
from verify.workload import read_journal


def _partition_dirs(b) -> list[Path]:
    return [d for d in b.data_dir.iterdir() if d.is_dir()]


def _files(b, pattern: str) -> list[Path]:
    return [f for d in _partition_dirs(b) for f in d.glob(pattern)]


def delete_snapshots(b) -> str:
    doomed = _files(b, "*.snapshot")
    assert any(TOPIC in f.parent.name for f in doomed), "no producer-state snapshot to delete"
    for f in doomed:
        f.unlink()
    return ""  # nothing to report: a partition without a snapshot replays its whole log


def garble_snapshots(b) -> str:
    for f in _files(b, "*.snapshot"):
        f.write_bytes(random.Random(f.name).randbytes(f.stat().st_size))
    return r"deleted \d{20}\.snapshot"


def delete_offset_indexes(b) -> str:
    for f in _files(b, "*.index"):
        f.unlink()
    return r"rebuilt \d{20}\.index \(missing\)"


def garble_time_indexes(b) -> str:
    for f in _files(b, "*.timeindex"):
        f.write_bytes(b"\xff" * 13)
    return r"rebuilt \d{20}\.timeindex"


# (how the broker goes down, the damage done meanwhile). A clean stop snapshots every partition, so
# the first outage finds snapshots to damage. A kill -9 makes startup CRC-check and re-index everything
# after the recovery point, so index damage is done after clean stops, where the indexes are loaded as
# they are and must be validated.
OUTAGES = [("stop", garble_snapshots), ("stop", delete_offset_indexes), ("kill", delete_snapshots),
           ("stop", garble_time_indexes)]
ROUNDS = budget(1, 4, "MOLDAU_CHAOS_DAMAGE_ROUNDS")


@pytest.mark.timeout(budget(240, 1200))
def test_rebuildable_files_damaged_between_restarts(start_broker, tmp_path):
    b = start_broker(GROUP_BROKER, {"log.segment.bytes": 256 * 1024})
    started = time.monotonic()
    with WorkloadRun(b, tmp_path / "journal") as run:
        repairs = []
        for _ in range(ROUNDS):
            for down, damage in OUTAGES:
                run.wait_for_progress(f"before {damage.__name__}")
                b.kill() if down == "kill" else b.stop()
                expected = damage(b)
                mark = b.log_offset()
                b.restart()
                if expected:
                    repairs.append(b.wait_for_log(rf"recovery: {TOPIC}-\d+: .*{expected}", since=mark))
        run.wait_for_progress("after the last restart")
        verdict = run.finish()
    record_result(
        "damaged_rebuildable_files",
        outages=[f"{down} + {damage.__name__}" for down, damage in OUTAGES] * ROUNDS,
        records_checked=verdict["stats"]["read_committed"],
        violations=verdict["violations"],
        repair_example=repairs[0] if repairs else None,
        seconds=round(time.monotonic() - started, 1),
    )


def _batches(segment: Path) -> list:
    batches, end, reason = valid_prefix(segment.read_bytes())
    assert reason is None, f"{segment.name} was damaged before the test damaged it: {reason} at {end}"
    return batches


def flip_mid_segment(segments: list[Path]) -> tuple[int, str]:
    """Flip bytes inside the middle batch of an earlier segment; returns (first offset lost, log pattern)."""
    assert len(segments) >= 3, f"need segments before and after the damaged one: {[s.name for s in segments]}"
    segment = segments[len(segments) // 2]
    batches = _batches(segment)
    position, hdr = batches[len(batches) // 2]
    data = bytearray(segment.read_bytes())
    middle = position + HEADER_SIZE + (hdr.size - HEADER_SIZE) // 2
    data[middle : middle + 8] = bytes(b ^ 0x5A for b in data[middle : middle + 8])
    segment.write_bytes(bytes(data))
    later = len(segments) - segments.index(segment) - 1
    report = rf"truncated \d+ bytes of {segment.name} at offset {hdr.base_offset} .*deleted {later} later"
    return hdr.base_offset, report


def tear_last_batch(segments: list[Path]) -> tuple[int, str]:
    """Cut the last batch of the newest segment in half, as a crash mid-write would."""
    segment = segments[-1]
    position, hdr = _batches(segment)[-1]
    segment.write_bytes(segment.read_bytes()[: position + hdr.size // 2])
    return hdr.base_offset, rf"truncated \d+ bytes of {segment.name} at offset {hdr.base_offset}"


@pytest.mark.timeout(120)
def test_torn_transaction_state_tail_loses_no_transaction(start_broker, tmp_path):
    """The transaction coordinator's last state change is torn off: every transaction keeps its outcome,
    and the transactional id can be used again."""
    b = start_broker()
    journal = tmp_path / "journal"
    writer = next(w for w in PLAN if w.kind == "transactional-producer")
    create_topic(b.bootstrap, TOPIC, PARTITIONS)
    with WorkloadProcess(writer.kind, b.bootstrap, journal, writer.name, **writer.options) as process:
        wait_for(lambda: journal_lines(journal) > 100, 60, "100 finished transactions")
        assert process.stop(60) == 0, process.stderr_tail()
    b.kill()

    state = b.partition_dir("__transaction_state", partition_for(writer.name, 50))
    _, report = tear_last_batch(sorted(state.glob("*.log")))
    mark = b.log_offset()
    b.restart()
    line = b.wait_for_log(rf"recovery: {state.name}: {report}", since=mark)
    # the torn record ended the last transaction: the coordinator finds it prepared and finishes it
    b.wait_for_log(rf"completing .*{writer.name}.* left by the previous coordinator", since=mark)
    verdict = verify(b.bootstrap, journal)
    assert verdict.ok and verdict.stats["txn_committed"] > 50, verdict.render()
    again = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": writer.name})
    again.init_transactions(30)
    again.begin_transaction()
    again.produce(TOPIC, value=b"after the repair", partition=0)
    again.commit_transaction(30)
    record_result("torn_transaction_state", transactions=verdict.stats["txn_committed"] + verdict.stats["txn_aborted"],
                  violations=verdict.violation_count, broker_said=line.split(": ", 1)[-1])


@pytest.mark.timeout(120)
@pytest.mark.parametrize("damage", [flip_mid_segment, tear_last_batch], ids=["flipped-mid-segment", "torn-last-batch"])
def test_corrupt_batch_costs_exactly_itself_and_what_follows(start_broker, tmp_path, damage):
    b = start_broker({"log.segment.bytes": 16 * 1024})
    journal = tmp_path / "journal"
    writer = PLAN[0]
    create_topic(b.bootstrap, TOPIC, PARTITIONS)
    with WorkloadProcess(writer.kind, b.bootstrap, journal, writer.name, **writer.options) as process:
        wait_for(lambda: journal_lines(journal) > 3000, 60, "3000 acknowledged records")
        assert process.stop(60) == 0, process.stderr_tail()
    acks = read_journal(journal).acks
    b.kill()  # unclean: startup CRC-checks every segment after the recovery point

    damaged = b.partition_dir(TOPIC, 0)
    cut, report = damage(b.segment_files(TOPIC, 0))
    recovery_point = read_offset_checkpoint(b.data_dir / "recovery-point-offset-checkpoint").get((TOPIC, 0), 0)
    assert recovery_point <= cut, f"the damage at offset {cut} lies below the recovery point {recovery_point}"
    mark = b.log_offset()
    b.restart()
    line = b.wait_for_log(rf"recovery: {damaged.name}: {report}", since=mark)

    verdict = verify(b.bootstrap, journal)
    expected = sorted(o for (topic, p, o) in acks.values() if p == 0 and o >= cut)
    assert expected, "test bug: the damage hit no acknowledged record"
    lost = sorted(int(re.search(rf"{TOPIC}\[0\]@(\d+)", v)[1]) for v in verdict.violations.get("lost", []))
    assert set(verdict.violations) == {"lost"} and lost == expected, (
        f"expected exactly the {len(expected)} records from offset {cut} of {TOPIC}[0] lost:\n{verdict.render()}")
    p, _ = producer(b.bootstrap)
    assert produce_one(p, TOPIC, 0, None, b"after the repair") == cut, "the repaired log continues at the cut"
    record_result(f"corrupt_segment_{damage.__name__}", records_acked=len(acks), records_lost=len(lost),
                  first_lost_offset=cut, broker_said=line.split(": ", 1)[-1])
