"""SharePartition: one share group's view of one topic partition (KIP-932; Kafka's SharePartition).

Offsets below the share-partition start offset (SPSO, ``start``) are done.
Offsets in [start, next_offset) form the in-flight window; each one there has a
state and a delivery count:

    AVAILABLE --acquire--> ACQUIRED (member, lock deadline, delivery count + 1)
    ACQUIRED --ACCEPT--> ACKNOWLEDGED
    ACQUIRED --REJECT / GAP--> ARCHIVED
    ACQUIRED --RELEASE, lock timeout, session closed--> AVAILABLE,
             or ARCHIVED once the delivery count reached group.share.delivery.count.limit
    ACQUIRED --RENEW--> ACQUIRED with a new lock deadline (KIP-1222)

Offsets at or past ``next_offset`` were never acquired. The start moves past a
prefix of ACKNOWLEDGED / ARCHIVED offsets. Offsets a log no longer holds (compacted
away) have no entry and count as done. Records of aborted transactions and
control batches are ARCHIVED when met, never handed out.

Pure logic: the manager reads the log, persists the durable part (every state but
ACQUIRED, which is persisted as AVAILABLE with its count) and runs the clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

from protocol.records import BatchHeader


class RecordState(IntEnum):
    # the values Kafka persists in a share snapshot's state batches (ACQUIRED is never persisted)
    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVED = 4


class AcknowledgeType(IntEnum):
    GAP = 0
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3
    RENEW = 4  # KIP-1222: still acquired, its lock starts again


DONE = (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)


@dataclass(slots=True)
class InFlight:
    state: RecordState = RecordState.AVAILABLE
    delivery_count: int = 0
    member_id: str | None = None
    deadline_ms: int = 0


class InvalidRecordState(Exception):
    """An acknowledgement of an offset that is not acquired by this member (INVALID_RECORD_STATE)."""


class SharePartition:
    def __init__(self, start: int, max_in_flight: int, delivery_limit: int) -> None:
        self.start = start
        self.next_offset = start
        self.records: dict[int, InFlight] = {}
        # indexes of ``records`` by state, kept by _set: what a fetch and the lock timer look at
        self.available: set[int] = set()
        self.acquired: dict[int, InFlight] = {}
        self.max_in_flight = max_in_flight
        self.delivery_limit = delivery_limit
        self.acquired_total = 0  # records handed out since this broker loaded the partition (a metric)
        self.leader_epoch = -1  # of the topic partition's leadership it was loaded in
        self.state_epoch = 0  # of the durable state it was made from (InitializeShareGroupState's)

    # ---- the durable part --------------------------------------------------------

    def state_batches(self) -> list[dict]:
        """The window as Kafka's share snapshot holds it: runs of offsets of one state and delivery count."""
        batches: list[dict] = []
        for offset in sorted(self.records):
            r = self.records[offset]
            state = RecordState.AVAILABLE if r.state == RecordState.ACQUIRED else r.state
            last = batches[-1] if batches else None
            if (last and last["last_offset"] == offset - 1 and last["delivery_state"] == state
                    and last["delivery_count"] == r.delivery_count):
                last["last_offset"] = offset
            else:
                batches.append({"first_offset": offset, "last_offset": offset, "delivery_state": int(state),
                                "delivery_count": r.delivery_count})
        return batches

    def restore(self, start: int, batches: list[dict]) -> None:
        self.reset(start)
        for b in batches:
            for offset in range(max(b["first_offset"], start), b["last_offset"] + 1):
                record = self.records[offset] = InFlight(RecordState.ARCHIVED, b["delivery_count"])
                self._set(offset, record, RecordState(b["delivery_state"]))
                self.next_offset = max(self.next_offset, offset + 1)
        self._advance()

    # ---- acquiring ---------------------------------------------------------------

    def first_to_read(self, end: int) -> int | None:
        """Where the next acquisition reads from: the first AVAILABLE offset in the window, else the
        window's end if the log has records there (below ``end``) and the window has room."""
        available = [o for o in self.available if o < end]
        if available:
            return min(available)
        if self.next_offset < end and self.next_offset - self.start < self.max_in_flight:
            return self.next_offset
        return None

    def acquire(self, batches: list[BatchHeader], end: int, member_id: str, deadline_ms: int, max_records: int,
                aborted: list[tuple[int, int]] | None = None, record_limit: bool = False) -> list[tuple[int, int, int]]:
        """Acquire the AVAILABLE or new offsets of ``batches`` (read from the log, in order) below ``end``,
        whole batches until at least ``max_records`` (``record_limit``, KIP-1206's mode: exactly at most
        that many): [(first, last, delivery count)]. ``aborted`` (a read_committed read): (producer id, first
        offset) of the aborted transactions among the batches, whose records are archived as a read_committed
        consumer would skip them."""
        acquired: list[tuple[int, int, int]] = []
        count = 0
        pending = sorted(aborted or [], key=lambda txn: txn[1])
        aborting: set[int] = set()  # producers inside an aborted transaction at this point of the log
        for hdr in batches:
            if count >= max_records:
                break
            while pending and pending[0][1] <= hdr.last_offset:
                aborting.add(pending.pop(0)[0])
            skip = hdr.is_control or (hdr.is_transactional and hdr.producer_id in aborting)
            if hdr.is_control:
                aborting.discard(hdr.producer_id)  # that transaction's marker ends it
            for offset in range(hdr.base_offset, hdr.last_offset + 1):
                if record_limit and count >= max_records:
                    break
                if offset < self.start or offset >= end:
                    continue
                record = self.records.get(offset)
                if record is None:
                    if offset < self.next_offset:
                        continue  # done (compacted away, or advanced past)
                    if offset - self.start >= self.max_in_flight:
                        break
                    record = self.records[offset] = InFlight(RecordState.ARCHIVED)
                    self._set(offset, record, RecordState.AVAILABLE)
                    self.next_offset = offset + 1
                if record.state != RecordState.AVAILABLE:
                    continue
                if skip:
                    self._set(offset, record, RecordState.ARCHIVED)
                    continue
                self._set(offset, record, RecordState.ACQUIRED)
                record.member_id, record.deadline_ms = member_id, deadline_ms
                record.delivery_count += 1
                count += 1
                if acquired and acquired[-1][1] == offset - 1 and acquired[-1][2] == record.delivery_count:
                    acquired[-1] = (acquired[-1][0], offset, record.delivery_count)
                else:
                    acquired.append((offset, offset, record.delivery_count))
        self.acquired_total += count
        self._advance()
        return acquired

    # ---- acknowledging and releasing ------------------------------------------------

    def acknowledge(self, member_id: str, first: int, last: int, types: list[int], renewed_deadline_ms: int = 0) -> None:
        """Apply one acknowledgement batch: one type for the whole range, or one per offset (a RENEW's lock
        runs until ``renewed_deadline_ms``). All or none: raises InvalidRecordState if any offset is not
        acquired by ``member_id``."""
        if (first < self.start or last >= self.next_offset or last < first or len(types) not in (1, last - first + 1)
                or any(t not in AcknowledgeType._value2member_map_ for t in types)):
            raise InvalidRecordState(f"acknowledgement batch {first}-{last} outside the in-flight records or malformed")
        for offset in range(first, last + 1):
            record = self.records.get(offset)
            if record is None or record.state != RecordState.ACQUIRED or record.member_id != member_id:
                raise InvalidRecordState(f"offset {offset} is not acquired by this member")
        for i, offset in enumerate(range(first, last + 1)):
            kind = AcknowledgeType(types[0] if len(types) == 1 else types[i])
            record = self.records[offset]
            if kind == AcknowledgeType.ACCEPT:
                self._set(offset, record, RecordState.ACKNOWLEDGED)
            elif kind == AcknowledgeType.RELEASE:
                self._release(offset, record)
            elif kind == AcknowledgeType.RENEW:
                record.deadline_ms = renewed_deadline_ms
            else:
                self._set(offset, record, RecordState.ARCHIVED)
        self._advance()

    def release_expired(self, now_ms: int) -> int:
        """Release the records whose acquisition lock ran out; how many."""
        expired = [(o, r) for o, r in self.acquired.items() if r.deadline_ms <= now_ms]
        for offset, record in expired:
            self._release(offset, record)
        self._advance()
        return len(expired)

    def release_member(self, member_id: str) -> int:
        """Release every record ``member_id`` holds (its share session closed); how many."""
        held = [(o, r) for o, r in self.acquired.items() if r.member_id == member_id]
        for offset, record in held:
            self._release(offset, record)
        self._advance()
        return len(held)

    def _release(self, offset: int, record: InFlight) -> None:
        self._set(offset, record, RecordState.ARCHIVED if record.delivery_count >= self.delivery_limit
                  else RecordState.AVAILABLE)

    def _set(self, offset: int, record: InFlight, state: RecordState) -> None:
        """Every change of a record's state goes here, which keeps the indexes."""
        if record.state == RecordState.AVAILABLE:
            self.available.discard(offset)
        elif record.state == RecordState.ACQUIRED:
            del self.acquired[offset]
            record.member_id, record.deadline_ms = None, 0
        record.state = state
        if state == RecordState.AVAILABLE:
            self.available.add(offset)
        elif state == RecordState.ACQUIRED:
            self.acquired[offset] = record

    def _advance(self) -> None:
        while self.start < self.next_offset:
            record = self.records.get(self.start)
            if record is not None and record.state not in DONE:
                break
            self.records.pop(self.start, None)
            self.start += 1

    def reset(self, start: int) -> None:
        """AlterShareGroupOffsets / a log start past the window: everything before ``start`` is done, the rest new."""
        self.start = self.next_offset = start
        self.records.clear()
        self.available.clear()
        self.acquired.clear()

    # ---- what it holds (DescribeShareGroupOffsets, metrics) ----------------------------

    def in_flight(self) -> int:
        return len(self.acquired)

    def backlog(self, end: int) -> int:
        """Records not yet acknowledged or archived, up to the log's ``end``."""
        undone = sum(1 for r in self.records.values() if r.state not in DONE)
        return undone + max(0, end - self.next_offset)

    @property
    def earliest_deadline(self) -> int | None:
        return min((r.deadline_ms for r in self.acquired.values()), default=None)
