"""Read a workload's topics back and check them against its journal.

The topics are read twice with confluent-kafka, once with
``isolation.level=read_committed`` (up to the last stable offset) and once
with ``read_uncommitted`` (up to the high watermark), and compared with what
the journal says was acknowledged, committed, aborted and processed:

- lost: an acknowledged record is not at its acknowledged offset, or no
  record of a committed transaction is visible;
- duplicate: a record (producer, seq) is visible more than once;
- order: a producer's records in one partition are not in sequence order;
- partial-transaction: some but not all records of a transaction are visible;
- aborted-visible: a record of an aborted transaction is visible;
- hidden: a non-transactional record below the last stable offset is missing
  from read_committed, or read_committed shows a record read_uncommitted lacks;
- offset-ahead: a consumer group committed an offset past a record none of
  its members processed, or past the last stable offset;
- lost also: a consume-transform-produce group committed past an input
  record whose copy is not visible in its output topic;
- unreadable: a record that is not in the workload format.

Every check reads the read_committed view, which is what applications see.
"""

from __future__ import annotations

import json
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, ConsumerGroupTopicPartitions, KafkaError
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient

from .workload import (
    ABORT,
    COMMIT,
    JournalContents,
    TopicPartition,
    WorkloadRecord,
    copy_producer,
    decode_value,
    read_journal,
)

READ_COMMITTED, READ_UNCOMMITTED = "read_committed", "read_uncommitted"
EXAMPLES = 5  # examples listed per kind of violation
NO_OFFSET = -1001  # librdkafka's OFFSET_INVALID: the group has no committed offset

# offset, the record (None if the value is not in the workload format), the value's first bytes
Row = tuple[int, WorkloadRecord | None, bytes]


class VerifyError(Exception):
    """The topics could not be read back, so nothing could be checked."""


@dataclass
class View:
    """One isolation level's reading of the topics: rows and end offset per partition."""

    rows: dict[TopicPartition, list[Row]]
    ends: dict[TopicPartition, int]

    @property
    def count(self) -> int:
        return sum(len(rows) for rows in self.rows.values())


@dataclass
class Verdict:
    violations: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    stats: Counter = field(default_factory=Counter)
    notes: list[str] = field(default_factory=list)

    def violate(self, kind: str, detail: str) -> None:
        self.violations[kind].append(detail)

    @property
    def ok(self) -> bool:
        return not self.violations

    @property
    def violation_count(self) -> int:
        return sum(map(len, self.violations.values()))

    def summary(self) -> dict:
        """The machine-readable verdict (``moldau verify --json``)."""
        return {
            "ok": self.ok,
            "violations": self.violation_count,
            "stats": dict(self.stats),
            "violations_by_kind": {kind: len(found) for kind, found in self.violations.items()},
            "violation_examples": {kind: found[:EXAMPLES] for kind, found in self.violations.items()},
            "notes": self.notes,
        }

    def render(self) -> str:
        s = self.stats
        lines = [
            f"moldau verify: {'PASS' if self.ok else 'FAIL'}",
            f"  topics:        {s['topics']} ({s['partitions']} partitions)",
            f"  records:       {s['read_committed']} read_committed, {s['read_uncommitted']} read_uncommitted",
            f"  acknowledged:  {s['acks']} records checked",
            f"  transactions:  {s['txn_committed']} committed, {s['txn_aborted']} aborted, "
            f"{s['txn_in_doubt']} in doubt",
            f"  groups:        {s['groups']} ({s['group_partitions']} committed partition offsets checked, "
            f"{s['copies']} copies)",
            f"  violations:    {self.violation_count}",
        ]
        for kind, found in sorted(self.violations.items()):
            lines.append(f"  {kind}: {len(found)}")
            lines += [f"    - {example}" for example in found[:EXAMPLES]]
        lines += [f"  note: {note}" for note in self.notes]
        return "\n".join(lines)


# --- reading ------------------------------------------------------------------


def _client_config(bootstrap: str) -> dict:
    return {"bootstrap.servers": bootstrap, "broker.address.family": "v4", "log.connection.close": False}


def read_view(bootstrap: str, topics: set[str], isolation: str, timeout: float) -> View:
    """Every record of ``topics`` from the start up to the end offset the isolation level allows."""
    consumer = Consumer({
        **_client_config(bootstrap),
        "group.id": "moldau-verify",  # never joined and never committed: only assign() is used
        "enable.auto.commit": False,
        "isolation.level": isolation,
        "enable.partition.eof": True,
        "fetch.wait.max.ms": 100,  # the topics are at rest: an empty fetch just means the end
    })
    try:
        metadata = consumer.list_topics(timeout=timeout)
        assignment = []
        for topic in sorted(topics):
            described = metadata.topics.get(topic)
            if described is None or described.error is not None:
                raise VerifyError(f"topic {topic} is not on the broker ({described and described.error})")
            assignment += [KafkaTopicPartition(topic, p, OFFSET_BEGINNING) for p in sorted(described.partitions)]
        # For read_committed, librdkafka asks ListOffsets for the last stable offset.
        ends = {(tp.topic, tp.partition): consumer.get_watermark_offsets(tp, timeout=timeout, cached=False)[1]
                for tp in assignment}
        rows: dict[TopicPartition, list[Row]] = {key: [] for key in ends}
        pending = {key for key, end in ends.items() if end > 0}
        consumer.assign(assignment)
        deadline = time.monotonic() + timeout
        while pending:
            if time.monotonic() > deadline:
                progress = {f"{t}[{p}]": (rows[(t, p)][-1][0] if rows[(t, p)] else None, ends[(t, p)])
                            for t, p in sorted(pending)}
                raise VerifyError(f"{isolation} read did not reach the end within {timeout:.0f}s: "
                                  f"(last offset read, end) {progress}")
            for message in consumer.consume(num_messages=10_000, timeout=0.1):
                key = (message.topic(), message.partition())
                error = message.error()
                if error is None:
                    value = message.value()
                    rows[key].append((message.offset(), decode_value(value), (value or b"")[:60]))
                elif error.code() == KafkaError._PARTITION_EOF:
                    if message.offset() >= ends[key]:
                        pending.discard(key)
                else:
                    raise VerifyError(f"{isolation} read of {key[0]}[{key[1]}] failed: {error}")
        return View(rows, ends)
    finally:
        consumer.close()


def read_group_offsets(bootstrap: str, groups: list[str], timeout: float) -> dict[str, dict[TopicPartition, int]]:
    """Each group's committed offsets (partitions without one are left out)."""
    admin = AdminClient(_client_config(bootstrap))
    result = {}
    for group in groups:
        future = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group]
        try:
            listed = future.result(timeout)
        except Exception as exc:  # noqa: BLE001 -- KafkaException, or the future's TimeoutError
            raise VerifyError(f"could not fetch the committed offsets of group {group}: {exc}") from None
        result[group] = {(tp.topic, tp.partition): tp.offset for tp in listed.topic_partitions
                         if tp.offset != NO_OFFSET}
    return result


# --- checking -------------------------------------------------------------------


def _where(tp: TopicPartition, offset: int) -> str:
    return f"{tp[0]}[{tp[1]}]@{offset}"


def _check_records(view: View, verdict: Verdict) -> dict[tuple[str, int], list[tuple[TopicPartition, int]]]:
    """unreadable, duplicate and order checks; returns where each (producer, seq) is visible."""
    positions: dict[tuple[str, int], list[tuple[TopicPartition, int]]] = defaultdict(list)
    for tp, rows in sorted(view.rows.items()):
        last_seq: dict[str, int] = {}
        for offset, record, head in rows:
            if record is None:
                verdict.violate("unreadable", f"{_where(tp, offset)}: {head!r}")
                continue
            positions[(record.producer, record.seq)].append((tp, offset))
            before = last_seq.get(record.producer)
            if before is not None and record.seq < before:  # an equal one is a duplicate, reported below
                verdict.violate("order", f"{_where(tp, offset)}: {record.producer}#{record.seq} after #{before}")
            last_seq[record.producer] = record.seq
    for (producer, seq), found in positions.items():
        if len(found) > 1:
            verdict.violate("duplicate", f"{producer}#{seq} at " + ", ".join(_where(*at) for at in found))
    return positions


def _check_acks(journal: JournalContents, positions, verdict: Verdict) -> None:
    for (producer, seq), (topic, partition, offset) in sorted(journal.acks.items()):
        found = positions.get((producer, seq), [])
        if ((topic, partition), offset) not in found:
            elsewhere = ", ".join(_where(*at) for at in found) or "nowhere"
            verdict.violate("lost", f"{producer}#{seq} acknowledged at {_where((topic, partition), offset)}, "
                                    f"visible {elsewhere}")
    verdict.stats["acks"] = len(journal.acks)


def _transaction_records(view: View) -> tuple[Counter, dict[str, int]]:
    """Records visible per transaction, and each transaction's size as its records state it."""
    visible: Counter = Counter()
    sizes = {}
    for rows in view.rows.values():
        for _, record, _ in rows:
            if record is not None and record.txn is not None:
                visible[record.txn] += 1
                sizes[record.txn] = record.txn_size
    return visible, sizes


def _check_transactions(journal: JournalContents, committed: View, uncommitted: View, verdict: Verdict) -> None:
    visible, sizes = _transaction_records(committed)
    sizes.update(_transaction_records(uncommitted)[1])
    for key in sorted(set(journal.txns) | set(sizes)):
        outcome, size = journal.txns.get(key, (None, sizes.get(key, 0)))
        name = f"transaction {key}"
        count = visible[key]
        verdict.stats[{COMMIT: "txn_committed", ABORT: "txn_aborted"}.get(outcome, "txn_in_doubt")] += 1
        if outcome == ABORT and count:
            verdict.violate("aborted-visible", f"{name}: {count} of its {size} records visible to read_committed")
        elif 0 < count < size:
            verdict.violate("partial-transaction", f"{name}: {count} of {size} records visible to read_committed")
        elif outcome == COMMIT and count == 0:
            verdict.violate("lost", f"{name} was committed, but none of its {size} records is visible")


def _check_views_agree(committed: View, uncommitted: View, verdict: Verdict) -> None:
    for tp, rows in sorted(uncommitted.rows.items()):
        stable = committed.ends.get(tp, 0)
        if stable < uncommitted.ends[tp]:
            verdict.notes.append(f"{tp[0]}[{tp[1]}]: last stable offset {stable} below the high watermark "
                                 f"{uncommitted.ends[tp]} (a transaction is open)")
        shown = {offset: record for offset, record, _ in committed.rows.get(tp, [])}
        everything = {offset: record for offset, record, _ in rows}
        for offset, record in sorted(shown.items()):
            if everything.get(offset) != record:
                verdict.violate("hidden", f"{_where(tp, offset)}: read_committed shows {record}, "
                                          f"read_uncommitted {everything.get(offset)}")
        for offset, record in sorted(everything.items()):
            if offset < stable and record is not None and record.txn is None and offset not in shown:
                verdict.violate("hidden", f"{_where(tp, offset)}: {record.producer}#{record.seq} is not "
                                          "transactional but read_committed skips it")


def _group_offsets(group: str, offsets: dict[str, dict[TopicPartition, int]], committed: View, verdict: Verdict,
                   topic: str | None = None):
    """The group's committed offsets (only those of ``topic`` if given); one past the last stable offset is a
    violation."""
    for tp, commit in sorted(offsets.get(group, {}).items()):
        if topic is not None and tp[0] != topic:
            continue
        verdict.stats["group_partitions"] += 1
        end = committed.ends.get(tp, 0)
        if commit > end:
            verdict.violate("offset-ahead", f"group {group} committed {_where(tp, commit)}, past the last stable "
                                            f"offset {end}")
        yield tp, commit


def _check_groups(journal: JournalContents, committed: View, offsets: dict[str, dict[TopicPartition, int]],
                  verdict: Verdict) -> None:
    for group, processed in sorted(journal.processed.items()):
        verdict.stats["groups"] += 1
        for tp, commit in _group_offsets(group, offsets, committed, verdict):
            done = processed.get(tp, set())
            skipped = next((o for o, _, _ in committed.rows.get(tp, []) if o < commit and o not in done), None)
            if skipped is not None:
                verdict.violate("offset-ahead", f"group {group} committed {_where(tp, commit)} but never "
                                                f"processed offset {skipped}")


def _check_copies(journal: JournalContents, committed: View, positions, offsets: dict[str, dict[TopicPartition, int]],
                  verdict: Verdict) -> None:
    for copy in sorted(journal.copies):
        verdict.stats["groups"] += 1
        for tp, commit in _group_offsets(copy.group, offsets, committed, verdict, copy.input):
            for offset, record, _ in committed.rows.get(tp, []):
                if offset >= commit:
                    break
                if record is None:
                    continue  # reported as unreadable
                copied = (copy_producer(copy.group, record.producer), record.seq)
                if any(topic == copy.output for (topic, _), _ in positions.get(copied, [])):
                    verdict.stats["copies"] += 1
                else:
                    verdict.violate("lost", f"{_where(tp, offset)}: group {copy.group} committed past "
                                            f"{record.producer}#{record.seq}, but {copy.output} has no copy of it")


def check(journal: JournalContents, committed: View, uncommitted: View,
          group_offsets: dict[str, dict[TopicPartition, int]]) -> Verdict:
    verdict = Verdict()
    verdict.stats.update(topics=len(journal.topics), partitions=len(uncommitted.ends),
                         read_committed=committed.count, read_uncommitted=uncommitted.count)
    for conflict in journal.conflicts:
        verdict.violate("journal", conflict)
    positions = _check_records(committed, verdict)
    _check_acks(journal, positions, verdict)
    _check_transactions(journal, committed, uncommitted, verdict)
    _check_views_agree(committed, uncommitted, verdict)
    _check_groups(journal, committed, group_offsets, verdict)
    _check_copies(journal, committed, positions, group_offsets, verdict)
    for producer, end in sorted(journal.ends.items()):
        if end["failed"] or end["sent"] != end["acked"]:
            verdict.notes.append(f"{producer} sent {end['sent']}, {end['acked']} acknowledged, {end['failed']} failed")
    return verdict


def verify(bootstrap: str, journal_dir: Path, timeout: float = 60.0) -> Verdict:
    """Read the journal in ``journal_dir`` and the topics it names from ``bootstrap``, and check them."""
    try:
        journal = read_journal(journal_dir)
    except (OSError, ValueError) as exc:
        raise VerifyError(f"unreadable journal: {exc}") from None
    if not journal.topics:
        raise VerifyError(f"no journal in {journal_dir} names a topic")
    committed = read_view(bootstrap, journal.topics, READ_COMMITTED, timeout)
    uncommitted = read_view(bootstrap, journal.topics, READ_UNCOMMITTED, timeout)
    groups = set(journal.processed) | {copy.group for copy in journal.copies}
    group_offsets = read_group_offsets(bootstrap, sorted(groups), timeout)
    return check(journal, committed, uncommitted, group_offsets)


def main(bootstrap: str, journal_dir: Path, timeout: float, json_path: Path | None) -> int:
    """``moldau verify``: print the verdict; 0 if it passed, 1 on violations, 2 if nothing could be checked."""
    try:
        verdict = verify(bootstrap, journal_dir, timeout)
    except VerifyError as exc:
        print(f"moldau verify: cannot check: {exc}")
        return 2
    print(verdict.render())
    if json_path is not None:
        json_path.write_text(json.dumps(verdict.summary(), indent=2) + "\n")
    return 0 if verdict.ok else 1
