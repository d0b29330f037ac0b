"""Per-partition producer state: what makes an idempotent producer's retries safe.

For every producer id that wrote to a partition, its log keeps the producer's
epoch and the metadata of its last five batches (a client has at most five
requests in flight per partition). Each batch is checked before it gets
offsets:

- the same epoch and sequence range as a remembered batch: a retry whose
  first attempt was stored; nothing is appended and the answer repeats the
  original offsets;
- the same epoch: the first sequence must follow the last one (sequences wrap
  from 2**31-1 to 0); a gap is OUT_OF_ORDER_SEQUENCE_NUMBER;
- an older epoch: INVALID_PRODUCER_EPOCH; a newer epoch must start at 0;
- a producer the partition has no state for (never seen, or expired): any
  sequence is accepted, as Kafka does since 2.5 (KIP-360) -- the producer may
  legitimately carry on after its state expired, and there is nothing to
  compare a retry with anyway.

Only batch headers are read, so the check costs the same for a batch of one
record or of thousands.

A partition remembers at most MAX_PRODUCERS producers: past that, a new one
makes it forget the least recently used producer without an open transaction
(which then counts as expired: its next batch is accepted whatever its
sequence). The producer.id.expiration.ms cleanup bounds the state by time,
this by count, so a client inventing producer ids cannot grow it without end.

Transactions: a producer's first transactional batch opens its transaction
in the partition, and the coordinator's commit or abort marker closes it.
The open ones are kept in the order they began, so the first unstable
offset -- where the earliest open transaction began, which bounds the last
stable offset -- is read off in constant time. While a producer's
transaction is open here, a non-transactional batch of it is refused, so
nothing moves it past the epoch of the marker that will end the transaction.
Markers are not sequenced;
one from an older producer epoch or an older coordinator is refused.

The state survives restarts through snapshots, ``<offset>.snapshot`` in the
partition directory, written at segment roll and clean shutdown: the state
of every batch below ``offset``, CRC-protected. Loading takes the newest valid
snapshot at or below the log end and replays the batch headers after it; with
no usable snapshot it replays the whole log.
"""

from __future__ import annotations

import re
import struct
from collections import OrderedDict, deque
from pathlib import Path
from typing import Iterable, NamedTuple

from crc32c import crc32c

from protocol.records import NO_PRODUCER_ID, NO_SEQUENCE, TRANSACTIONAL_BIT, BatchHeader
from storage.errors import (
    CorruptSnapshot,
    DuplicateSequence,
    InvalidProducerEpoch,
    InvalidProducerRecord,
    InvalidTxnState,
    OutOfOrderSequence,
    TransactionCoordinatorFenced,
)
from storage.files import atomic_write

BATCHES_PER_PRODUCER = 5  # the most requests a client has in flight per partition
# Producers remembered per partition: a flood of producer ids (one per request, each new) costs a
# bounded amount of memory and snapshot, the least recently used idle producer being forgotten.
MAX_PRODUCERS = 10_000
SEQUENCE_LIMIT = 1 << 31  # sequence numbers wrap from 2**31-1 to 0
SNAPSHOT_SUFFIX = ".snapshot"
SNAPSHOT_VERSION = 1
NO_COORDINATOR_EPOCH = -1
NO_TXN_OFFSET = -1

_SNAPSHOT_FILE = re.compile(r"(\d{20})" + re.escape(SNAPSHOT_SUFFIX))
# version, CRC32C of everything after the header
_SNAPSHOT_HEADER = struct.Struct(">hI")
_COUNT = struct.Struct(">i")
# producer id, epoch, coordinator epoch, current txn first offset, last append time, batch count
_ENTRY = struct.Struct(">qhiqqb")
# first sequence, last sequence, first offset, last offset, max timestamp
_BATCH = struct.Struct(">iiqqq")


def snapshot_name(offset: int) -> str:
    return f"{offset:020d}{SNAPSHOT_SUFFIX}"


def in_sequence(last_seq: int, next_seq: int) -> bool:
    """Whether ``next_seq`` directly follows ``last_seq`` (-1: nothing yet, so 0 follows)."""
    return next_seq == (last_seq + 1) % SEQUENCE_LIMIT


class BatchMetadata(NamedTuple):
    """One stored batch of a producer: enough to recognise a retry and answer it."""

    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int


class ProducerStateEntry:
    """One producer id's state in one partition."""

    __slots__ = ("producer_id", "producer_epoch", "batches", "coordinator_epoch", "current_txn_first_offset",
                 "last_append_ms")

    def __init__(
        self,
        producer_id: int,
        producer_epoch: int,
        *,
        coordinator_epoch: int = NO_COORDINATOR_EPOCH,
        current_txn_first_offset: int = NO_TXN_OFFSET,
        last_append_ms: int = 0,
    ) -> None:
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.batches: deque[BatchMetadata] = deque(maxlen=BATCHES_PER_PRODUCER)
        # Set by the transaction coordinator's markers; an open transaction keeps the entry from expiring.
        self.coordinator_epoch = coordinator_epoch
        self.current_txn_first_offset = current_txn_first_offset
        self.last_append_ms = last_append_ms  # broker time of the last append: idle producers expire

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    @property
    def last_timestamp(self) -> int:
        return self.batches[-1].timestamp if self.batches else -1

    def find_duplicate(self, hdr: BatchHeader) -> BatchMetadata | None:
        if hdr.producer_epoch != self.producer_epoch:
            return None
        first, last = hdr.base_sequence, hdr.last_sequence
        for batch in self.batches:
            if batch.first_seq == first and batch.last_seq == last:
                return batch
        return None

    def update_epoch(self, epoch: int) -> None:
        if epoch != self.producer_epoch:
            self.producer_epoch = epoch
            self.batches.clear()  # sequences of the old epoch mean nothing in the new one

    def add(self, hdr: BatchHeader, now_ms: int) -> None:
        """Remember a stored batch (its header carries the assigned offsets)."""
        self.update_epoch(hdr.producer_epoch)
        self.batches.append(
            BatchMetadata(hdr.base_sequence, hdr.last_sequence, hdr.base_offset, hdr.last_offset, hdr.max_timestamp)
        )
        self.last_append_ms = now_ms


def _check_fields(hdr: BatchHeader) -> None:
    """Refuse producer fields that do not go together.

    A sequence without a producer id is ignored, as Kafka does: aiokafka
    sends base sequence 0 in every batch of a plain producer.
    """
    if hdr.producer_id == NO_PRODUCER_ID:
        if hdr.attributes & TRANSACTIONAL_BIT:
            raise InvalidProducerRecord("a transactional batch without a producer id")
    elif hdr.producer_id < 0 or hdr.producer_epoch < 0 or hdr.base_sequence < 0:
        raise InvalidProducerRecord(
            f"producer id {hdr.producer_id} with epoch {hdr.producer_epoch} and sequence {hdr.base_sequence}"
        )


class ProducerStateManager:
    """The producer state of one partition log, and its snapshots in ``directory``."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.producers: dict[int, ProducerStateEntry] = {}
        # producer id -> first offset of its open transaction, in the order they began
        self.ongoing_txns: OrderedDict[int, int] = OrderedDict()

    @property
    def first_unstable_offset(self) -> int | None:
        """Where the earliest open transaction began; None when none is open."""
        ongoing = self.ongoing_txns
        return next(iter(ongoing.values())) if ongoing else None  # (a fetch asks it of every partition)

    # --- the append path -----------------------------------------------------

    def check(self, batches: list[tuple[int, BatchHeader]], from_coordinator: bool = False) -> BatchMetadata | None:
        """Validate batches about to be appended, in order, before any of them is.

        Returns the stored original when the (single) batch is a retry, in
        which case nothing may be appended. Raises a ProducerStateError
        subclass for a batch that must be refused. The group coordinator's
        own writes for a producer (transactional offset commits) have no
        client sequence to check, only the epoch.
        """
        # (epoch, last sequence) per producer after the batches checked so far
        expected: dict[int, tuple[int, int]] = {}
        for _, hdr in batches:
            _check_fields(hdr)
            pid = hdr.producer_id
            if pid == NO_PRODUCER_ID:
                continue
            entry = self.producers.get(pid)
            if from_coordinator:
                if entry is not None and hdr.producer_epoch < entry.producer_epoch:
                    raise InvalidProducerEpoch(f"producer {pid} sent epoch {hdr.producer_epoch}, "
                                               f"current is {entry.producer_epoch}")
                continue
            duplicate = None if entry is None else entry.find_duplicate(hdr)
            if duplicate is not None:
                if len(batches) > 1:
                    raise DuplicateSequence(f"producer {pid} resent sequence {hdr.base_sequence} among others")
                return duplicate
            current = expected.get(pid)
            if current is None and entry is not None:
                current = (entry.producer_epoch, entry.last_seq)
            if current is not None:  # None: no state for this producer, so any sequence goes (module docstring)
                self._check_sequence(hdr, *current)
            if entry is not None and entry.current_txn_first_offset != NO_TXN_OFFSET and not hdr.is_transactional:
                # its transaction's marker must still land here, so nothing may move the producer on
                raise InvalidTxnState(f"producer {pid} sent a non-transactional batch in its open transaction")
            expected[pid] = (hdr.producer_epoch, hdr.last_sequence)
        return None

    @staticmethod
    def _check_sequence(hdr: BatchHeader, epoch: int, last_seq: int) -> None:
        pid, seq = hdr.producer_id, hdr.base_sequence
        if hdr.producer_epoch < epoch:
            raise InvalidProducerEpoch(f"producer {pid} sent epoch {hdr.producer_epoch}, current is {epoch}")
        if hdr.producer_epoch > epoch:
            if seq != 0:
                raise OutOfOrderSequence(f"producer {pid} started epoch {hdr.producer_epoch} at sequence {seq}, not 0")
        elif not in_sequence(last_seq, seq):
            raise OutOfOrderSequence(f"producer {pid} sent sequence {seq} after {last_seq}")

    def update(self, stored: Iterable[tuple[int, BatchHeader]], now_ms: int) -> None:
        """Record batches that were just written (headers with their offsets)."""
        for _, hdr in stored:
            if hdr.producer_id != NO_PRODUCER_ID:
                self.add_batch(hdr, now_ms)

    def add_batch(self, hdr: BatchHeader, now_ms: int) -> None:
        """Record one stored data batch of a producer."""
        entry = self.producers.pop(hdr.producer_id, None)  # and put back last: most recently used
        if entry is None:
            entry = self._new_entry(hdr.producer_id, hdr.producer_epoch)
        self.producers[hdr.producer_id] = entry
        entry.add(hdr, now_ms)
        if hdr.attributes & TRANSACTIONAL_BIT and entry.current_txn_first_offset == NO_TXN_OFFSET:
            entry.current_txn_first_offset = hdr.base_offset
            self.ongoing_txns[hdr.producer_id] = hdr.base_offset

    def _new_entry(self, producer_id: int, producer_epoch: int) -> ProducerStateEntry:
        """An entry for a producer not seen here; at MAX_PRODUCERS the least recently used producer
        without an open transaction is forgotten first, as if it had expired."""
        if len(self.producers) >= MAX_PRODUCERS:
            idle = next((pid for pid, e in self.producers.items() if e.current_txn_first_offset == NO_TXN_OFFSET), None)
            if idle is not None:
                del self.producers[idle]
        return ProducerStateEntry(producer_id, producer_epoch)

    # --- transaction markers ---------------------------------------------------

    def check_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int) -> None:
        """Refuse a marker from an older producer epoch or an older coordinator than ones seen here."""
        entry = self.producers.get(producer_id)
        if entry is None:
            return
        if producer_epoch < entry.producer_epoch:
            raise InvalidProducerEpoch(
                f"marker for producer {producer_id} with epoch {producer_epoch}, current is {entry.producer_epoch}")
        if coordinator_epoch < entry.coordinator_epoch:
            raise TransactionCoordinatorFenced(
                f"marker for producer {producer_id} from coordinator epoch {coordinator_epoch}, "
                f"already saw {entry.coordinator_epoch}")

    def complete_txn(self, producer_id: int, producer_epoch: int, coordinator_epoch: int, now_ms: int) -> int | None:
        """A marker of the producer was stored: its transaction here is over.

        Returns the offset the transaction began at, or None if it had
        written nothing here (a marker for a partition it only added, or a
        marker sent again after a coordinator restart). The marker's epoch
        may be newer: a coordinator that aborts a timed-out or fenced
        transaction bumps the epoch, which fences the old producer here too.
        """
        entry = self.producers.get(producer_id)
        if entry is None:
            entry = self.producers[producer_id] = self._new_entry(producer_id, producer_epoch)
        entry.update_epoch(producer_epoch)
        entry.coordinator_epoch = coordinator_epoch
        entry.last_append_ms = now_ms
        first_offset = entry.current_txn_first_offset
        if first_offset == NO_TXN_OFFSET:
            return None
        entry.current_txn_first_offset = NO_TXN_OFFSET
        del self.ongoing_txns[producer_id]
        return first_offset

    def remove_expired(self, now_ms: int, expiration_ms: int) -> int:
        """Forget producers idle for ``expiration_ms`` (producer.id.expiration.ms); returns how many."""
        expired = [
            pid
            for pid, entry in self.producers.items()
            if entry.current_txn_first_offset == NO_TXN_OFFSET and now_ms - entry.last_append_ms >= expiration_ms
        ]
        for pid in expired:
            del self.producers[pid]
        return len(expired)

    def truncate_head(self, log_start_offset: int) -> None:
        """The log start moved up: forget each producer whose last batch is now gone, unless
        it has an open transaction (Kafka's rule; its marker must still find it)."""
        gone = [
            pid
            for pid, entry in self.producers.items()
            if entry.current_txn_first_offset == NO_TXN_OFFSET
            and entry.batches
            and entry.batches[-1].last_offset < log_start_offset
        ]
        for pid in gone:
            del self.producers[pid]

    # --- snapshots and loading -------------------------------------------------

    def snapshot_offsets(self) -> list[int]:
        return sorted(int(m[1]) for p in self.directory.iterdir() if (m := _SNAPSHOT_FILE.fullmatch(p.name)))

    def take_snapshot(self, offset: int) -> None:
        """Persist the state of every batch below ``offset`` (the log end); older snapshots go.

        As in Kafka, nothing is written when there is nothing new: an empty log, or one snapshotted at
        this offset already (a broker with thousands of idle partitions shuts down in seconds)."""
        if offset == 0 or (self.directory / snapshot_name(offset)).exists():
            return
        atomic_write(self.directory / snapshot_name(offset), encode_snapshot(self.producers.values()))
        for older in self.snapshot_offsets():
            if older < offset:
                (self.directory / snapshot_name(older)).unlink(missing_ok=True)

    def clear(self) -> None:
        self.producers = {}
        self.ongoing_txns = OrderedDict()

    def load_snapshot(self, log_end: int) -> tuple[int, list[str]]:
        """Restore the newest usable snapshot: (its offset, 0 without one; repairs).

        The owner then replays the batches from that offset on (add_batch,
        complete_txn). Snapshots past the log end (the log was truncated after
        they were written) and corrupt ones are deleted.
        """
        repairs = []
        self.clear()
        start = 0
        for offset in reversed(self.snapshot_offsets()):
            path = self.directory / snapshot_name(offset)
            if offset > log_end:
                repairs.append(f"deleted {path.name}: past the log end {log_end}")
                path.unlink()
                continue
            try:
                self.producers = decode_snapshot(path.read_bytes())
            except CorruptSnapshot as exc:
                repairs.append(f"deleted {path.name} ({exc}); rebuilding producer state from the log")
                path.unlink()
                continue
            start = offset
            break
        open_txns = sorted((e.current_txn_first_offset, pid) for pid, e in self.producers.items()
                           if e.current_txn_first_offset != NO_TXN_OFFSET)
        self.ongoing_txns = OrderedDict((pid, first) for first, pid in open_txns)
        return start, repairs


def encode_snapshot(entries: Iterable[ProducerStateEntry]) -> bytes:
    body = bytearray()
    count = 0
    for e in entries:
        count += 1
        body += _ENTRY.pack(e.producer_id, e.producer_epoch, e.coordinator_epoch, e.current_txn_first_offset,
                            e.last_append_ms, len(e.batches))
        for batch in e.batches:
            body += _BATCH.pack(*batch)
    body[0:0] = _COUNT.pack(count)
    return _SNAPSHOT_HEADER.pack(SNAPSHOT_VERSION, crc32c(body)) + body


def decode_snapshot(data: bytes) -> dict[int, ProducerStateEntry]:
    if len(data) < _SNAPSHOT_HEADER.size + _COUNT.size:
        raise CorruptSnapshot("shorter than its header")
    version, crc = _SNAPSHOT_HEADER.unpack_from(data)
    if version != SNAPSHOT_VERSION:
        raise CorruptSnapshot(f"unknown version {version}")
    body = memoryview(data)[_SNAPSHOT_HEADER.size :]
    if crc32c(body) != crc:
        raise CorruptSnapshot("CRC32C mismatch")
    producers = {}
    (count,) = _COUNT.unpack_from(body)
    pos = _COUNT.size
    try:
        for _ in range(count):
            pid, epoch, coordinator_epoch, txn_offset, last_append_ms, n = _ENTRY.unpack_from(body, pos)
            pos += _ENTRY.size
            entry = ProducerStateEntry(pid, epoch, coordinator_epoch=coordinator_epoch,
                                       current_txn_first_offset=txn_offset, last_append_ms=last_append_ms)
            for _ in range(n):
                entry.batches.append(BatchMetadata._make(_BATCH.unpack_from(body, pos)))
                pos += _BATCH.size
            producers[pid] = entry
    except struct.error as exc:
        raise CorruptSnapshot(f"truncated ({exc})") from None
    if pos != len(body):
        raise CorruptSnapshot(f"{len(body) - pos} bytes after the last entry")
    return producers
