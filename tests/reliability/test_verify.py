"""The checker itself: it passes a clean workload and finds each kind of violation.

Topics are written by a plain confluent-kafka producer that puts exactly the
records a scenario needs where it needs them -- a "transaction" is plain
records carrying a transaction id, with one left out on purpose -- and the
journal is written by hand. Each scenario must be reported with its kind of
violation and nothing else, so the checker is shown able to fail.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import TopicPartition

from helpers.kafka import consumer, create_topic, produce_one, producer
from helpers.reliability import run_verify
from verify.checker import verify
from verify.workload import ABORT, COMMIT, Journal, WorkloadRecord, copy_producer, encode_value

PARTITIONS = 2


class Scenario:
    """One topic and one journal directory, filled record by record."""

    def __init__(self, broker, root: Path, name: str) -> None:
        self.bootstrap = broker.bootstrap
        self.topic = f"verify-{name}"
        self.journal_dir = root / name
        create_topic(self.bootstrap, self.topic, PARTITIONS)
        self.producer, _ = producer(self.bootstrap)
        self.journal = Journal(self.journal_dir, "writer")
        self.journal.write("topic", topic=self.topic)
        self.stored: list[tuple[int, int, WorkloadRecord]] = []  # (partition, offset, record) in topic

    def put(self, partition: int, record: WorkloadRecord, *, ack: bool = True, topic: str | None = None) -> int:
        """Store one record (in the scenario's topic unless told otherwise); journal its acknowledgement
        unless ``ack`` is False."""
        topic = topic or self.topic
        offset = produce_one(self.producer, topic, partition, None, encode_value(record, 50))
        if topic == self.topic:
            self.stored.append((partition, offset, record))
        if ack:
            self.journal.write("ack", producer=record.producer, seq=record.seq, topic=topic,
                               partition=partition, offset=offset)
        return offset

    def put_transaction(self, txn: str, size: int, partitions: list[int], outcome: str | None) -> None:
        """Records of transaction ``txn`` (of ``size`` records) to ``partitions``, then its outcome line."""
        for seq, partition in enumerate(partitions):
            self.put(partition, WorkloadRecord("tx", seq + 100 * int(txn[1:]), txn, size), ack=False)
        if outcome is not None:
            self.journal.write("txn", txn=txn, outcome=outcome, size=size)

    def copy_all_but(self, group: str, left_out: int) -> None:
        """What a copy app of ``group`` would do with everything stored so far, except that it leaves out
        the copies of the last ``left_out`` records but still commits the group's offsets past them."""
        output = f"{self.topic}-copy"
        create_topic(self.bootstrap, output, PARTITIONS)
        self.journal.write("copy", group=group, input=self.topic, output=output)
        txn = f"{group}:0"
        copied = self.stored[: len(self.stored) - left_out]
        for partition, _, record in copied:
            copy = WorkloadRecord(copy_producer(group, record.producer), record.seq, txn, len(copied))
            self.put(partition, copy, ack=False, topic=output)
        self.journal.write("txn", txn=txn, outcome=COMMIT, size=len(copied))
        ends = {p: max(o for q, o, _ in self.stored if q == p) + 1 for p in range(PARTITIONS)}
        c, _ = consumer(self.bootstrap, group_id=group)
        try:
            c.commit(offsets=[TopicPartition(self.topic, p, o) for p, o in ends.items()], asynchronous=False)
        finally:
            c.close()

    def commit_group(self, group: str, processed: dict[int, range], committed: dict[int, int]) -> None:
        """Journal ``processed`` offsets per partition for ``group``, then commit ``committed``."""
        self.journal.write("group", group=group)
        for partition, offsets in processed.items():
            for offset in offsets:
                self.journal.write("processed", group=group, topic=self.topic, partition=partition, offset=offset)
        c, _ = consumer(self.bootstrap, group_id=group)
        try:
            c.commit(offsets=[TopicPartition(self.topic, p, o) for p, o in committed.items()], asynchronous=False)
        finally:
            c.close()


def stream(s: Scenario, count: int, name: str = "idem") -> None:
    """Records 0..count-1 of producer ``name``, alternating partitions, all acknowledged."""
    for seq in range(count):
        s.put(seq % PARTITIONS, WorkloadRecord(name, seq))


def clean(s: Scenario) -> None:
    stream(s, 10)
    s.put_transaction("t1", 4, [0, 1, 0, 1], COMMIT)
    s.put_transaction("t2", 2, [], ABORT)  # aborted before any of its records was visible
    s.commit_group("readers", {0: range(7), 1: range(7)}, {0: 7, 1: 7})
    s.copy_all_but("copier", 0)


def lost(s: Scenario) -> None:
    stream(s, 4)
    s.journal.write("ack", producer="idem", seq=4, topic=s.topic, partition=0, offset=2)  # never stored


def duplicate(s: Scenario) -> None:
    stream(s, 4)
    s.put(1, WorkloadRecord("idem", 3), ack=False)  # a retry stored a second time


def order(s: Scenario) -> None:
    for seq in (0, 2, 1):
        s.put(0, WorkloadRecord("idem", seq))


def partial_transaction(s: Scenario) -> None:
    s.put_transaction("t1", 4, [0, 1, 0], None)  # the fourth record, for partition 1, is missing


def partial_committed_transaction(s: Scenario) -> None:
    s.put_transaction("t1", 3, [0, 1], COMMIT)


def aborted_visible(s: Scenario) -> None:
    s.put_transaction("t1", 2, [0, 1], ABORT)


def committed_transaction_lost(s: Scenario) -> None:
    stream(s, 2)
    s.put_transaction("t1", 3, [], COMMIT)


def offset_ahead(s: Scenario) -> None:
    stream(s, 10)
    s.commit_group("readers", {0: range(3), 1: range(5)}, {0: 5, 1: 5})  # offsets 3 and 4 of partition 0 skipped


def offset_past_the_end(s: Scenario) -> None:
    stream(s, 4)
    s.commit_group("readers", {0: range(2), 1: range(2)}, {0: 2, 1: 9})


def copy_missing(s: Scenario) -> None:
    stream(s, 6)
    s.copy_all_but("copier", 2)


def unreadable(s: Scenario) -> None:
    stream(s, 2)
    produce_one(s.producer, s.topic, 0, b"k", b"not a workload record")


FAILING = {  # scenario -> the only kind of violation it may be reported for
    lost: "lost",
    duplicate: "duplicate",
    order: "order",
    partial_transaction: "partial-transaction",
    partial_committed_transaction: "partial-transaction",
    aborted_visible: "aborted-visible",
    committed_transaction_lost: "lost",
    offset_ahead: "offset-ahead",
    offset_past_the_end: "offset-ahead",
    copy_missing: "lost",
    unreadable: "unreadable",
}


@pytest.mark.timeout(120)
def test_clean_workload_passes_and_each_violation_is_found(start_broker, tmp_path):
    b = start_broker()
    good = Scenario(b, tmp_path, "clean")
    clean(good)
    with open(good.journal.path, "a") as torn:  # a writer killed mid-line: that line is ignored
        torn.write('{"kind":"ack","producer":"idem","seq":99,"to')
    code, output, verdict = run_verify(b.bootstrap, good.journal_dir)
    assert code == 0, f"a clean workload failed verification:\n{output}"
    expected = {"acks": 10, "txn_committed": 2, "txn_aborted": 1, "groups": 2, "group_partitions": 4, "copies": 14,
                "read_committed": 28}
    assert verdict["stats"] | expected == verdict["stats"], output

    wrong = {}
    for scenario, kind in FAILING.items():
        s = Scenario(b, tmp_path, scenario.__name__.replace("_", "-"))
        scenario(s)
        found = verify(b.bootstrap, s.journal_dir).violations
        if set(found) != {kind}:
            wrong[scenario.__name__] = f"expected only {kind}, found {dict(found)}"
    assert not wrong, wrong

    # the command line: a violation exits 1 and lists examples, an unreadable journal exits 2
    code, output, verdict = run_verify(b.bootstrap, tmp_path / "order")
    assert code == 1 and "FAIL" in output and "order: 1" in output and verdict["violations"] == 1, output
    with open(good.journal.path, "a") as damaged:
        damaged.write("\nnot json\n")
    code, output, _ = run_verify(b.bootstrap, good.journal_dir)
    assert code == 2 and "unreadable journal" in output, output
