"""The self-describing workload format: record values and the acknowledgement journal.

Every record a workload writes carries its identity in its value, so the
checker can read a topic back with any client and know what each record is::

    {"w": 1, "producer": "idem-0", "seq": 17, "txn": null, "txn_size": 0, "pad": "..."}

- ``producer`` and ``seq``: who wrote it and its number in that producer's
  stream (0, 1, 2, ...; unique per producer);
- ``txn`` and ``txn_size``: the transaction it belongs to (an id unique in
  the run: its writer's name and a number) and how many records that
  transaction wrote across all its partitions, or null and 0 outside
  transactions;
- ``pad``: filler to the configured record size.

The journal is a directory of JSON-lines files, one per workload process, each
line appended only after the event it records happened:

- ``{"kind": "topic", "topic": T}``: the workload writes to or reads T;
- ``{"kind": "ack", "producer": P, "seq": S, "topic": T, "partition": N, "offset": O}``:
  the broker acknowledged record (P, S) at that offset;
- ``{"kind": "txn", "txn": X, "outcome": "commit" | "abort", "size": N}``:
  transaction X of N records was committed or aborted (CommitTransaction or
  AbortTransaction returned);
- ``{"kind": "group", "group": G}``: the workload consumes in consumer group G;
- ``{"kind": "processed", "group": G, "topic": T, "partition": N, "offset": O}``:
  a member of G processed that record, before committing past it;
- ``{"kind": "copy", "group": G, "input": T, "output": U}``: group G copies
  each record (P, S) of T to U as (``G/P``, S), in the transaction that
  commits its offsets (consume-transform-produce);
- ``{"kind": "end", "producer": P, "sent": N, "acked": N, "failed": N}``: the
  producer stopped; how many records it produced and how their delivery ended.

Lines of other kinds are evidence for a person reading a failed run (a copy
app's ``rewind`` to the committed offsets after an abort, its ``inputs``
offsets per transaction); the checker passes over them.

A line cut short by a crash of the writing process is ignored on reading.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, NamedTuple

FORMAT_VERSION = 1
JOURNAL_SUFFIX = ".jsonl"
COMMIT, ABORT = "commit", "abort"


class WorkloadRecord(NamedTuple):
    producer: str
    seq: int
    txn: str | None = None
    txn_size: int = 0


def copy_producer(group: str, producer: str) -> str:
    """The producer name consume-transform-produce group ``group`` gives its copies of ``producer``'s records."""
    return f"{group}/{producer}"


class Copy(NamedTuple):
    group: str
    input: str
    output: str


def encode_value(record: WorkloadRecord, size: int = 0) -> bytes:
    """The record's value, padded to about ``size`` bytes."""
    doc = {"w": FORMAT_VERSION, "producer": record.producer, "seq": record.seq, "txn": record.txn,
           "txn_size": record.txn_size, "pad": ""}
    text = json.dumps(doc, separators=(",", ":"))
    doc["pad"] = "x" * max(0, size - len(text))
    return json.dumps(doc, separators=(",", ":")).encode()


def decode_value(value: bytes | None) -> WorkloadRecord | None:
    """The record a value describes; None for a value not in the workload format."""
    try:
        doc = json.loads(value)
        if doc["w"] != FORMAT_VERSION:
            return None
        return WorkloadRecord(str(doc["producer"]), int(doc["seq"]), doc["txn"], int(doc["txn_size"]))
    except (TypeError, ValueError, KeyError):
        return None


class Journal:
    """One workload process's journal file; every line is flushed as it is written."""

    def __init__(self, directory: Path, name: str) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / f"{name}{JOURNAL_SUFFIX}"
        self._file: IO[str] = open(self.path, "a", encoding="utf-8")

    def write(self, kind: str, **fields) -> None:
        self._file.write(json.dumps({"kind": kind, **fields}, separators=(",", ":")) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


TopicPartition = tuple[str, int]


@dataclass
class JournalContents:
    """Everything the journal files of one run say."""

    topics: set[str] = field(default_factory=set)
    # (producer, seq) -> (topic, partition, offset)
    acks: dict[tuple[str, int], tuple[str, int, int]] = field(default_factory=dict)
    # txn -> (outcome, size)
    txns: dict[str, tuple[str, int]] = field(default_factory=dict)
    # group -> (topic, partition) -> offsets processed
    processed: dict[str, dict[TopicPartition, set[int]]] = field(default_factory=lambda: defaultdict(dict))
    copies: set[Copy] = field(default_factory=set)
    # producer -> {"sent": n, "acked": n, "failed": n}
    ends: dict[str, dict[str, int]] = field(default_factory=dict)
    conflicts: list[str] = field(default_factory=list)  # the journal contradicting itself

    def add(self, line: dict) -> None:
        kind = line["kind"]
        if kind == "topic":
            self.topics.add(line["topic"])
        elif kind == "ack":
            self._ack(line)
        elif kind == "txn":
            self.txns[line["txn"]] = (line["outcome"], int(line["size"]))
        elif kind == "group":
            self.processed.setdefault(line["group"], {})
        elif kind == "processed":
            tp = (line["topic"], int(line["partition"]))
            self.processed[line["group"]].setdefault(tp, set()).add(int(line["offset"]))
        elif kind == "copy":
            self.copies.add(Copy(line["group"], line["input"], line["output"]))
            self.topics.update((line["input"], line["output"]))
        elif kind == "end":
            self.ends[line["producer"]] = {k: int(line[k]) for k in ("sent", "acked", "failed")}

    def _ack(self, line: dict) -> None:
        key = (line["producer"], int(line["seq"]))
        where = (line["topic"], int(line["partition"]), int(line["offset"]))
        self.topics.add(where[0])
        earlier = self.acks.setdefault(key, where)
        if earlier != where:
            self.conflicts.append(f"{key[0]}#{key[1]} acknowledged twice: at {earlier} and at {where}")


def journal_files(directory: Path) -> list[Path]:
    return sorted(directory.glob("*" + JOURNAL_SUFFIX))


def read_journal(directory: Path) -> JournalContents:
    """The contents of every journal file in ``directory``.

    Raises ValueError for a malformed line anywhere but at the very end of a
    file (where a crashed writer may have left half a line).
    """
    contents = JournalContents()
    for path in journal_files(directory):
        lines = path.read_text(encoding="utf-8").split("\n")
        for number, text in enumerate(lines, 1):
            if not text:
                continue
            try:
                contents.add(json.loads(text))
            except (ValueError, KeyError, TypeError) as exc:
                if number == len(lines):  # a torn last line: its event may not have happened
                    continue
                raise ValueError(f"{path.name} line {number}: {exc}") from None
    return contents
