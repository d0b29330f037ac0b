"""A partition's log: segments, offset assignment, reads, transaction markers, flushing and recovery."""

from __future__ import annotations

import os
import re
import shutil
import uuid
from bisect import bisect_right
from pathlib import Path
from typing import Callable, Iterator

from protocol.errors import CorruptRecord
from protocol.records import (
    CONTROL_ABORT,
    CONTROL_COMMIT,
    NO_PRODUCER_ID,
    TIMESTAMP_TYPE_BIT,
    BatchHeader,
    control_batch,
    iter_records,
    read_control_marker,
    read_header,
    set_base_offset,
    set_leader_epoch,
    set_log_append_time,
)
from storage import clock
from storage.config import LogConfig
from storage.errors import CorruptIndex, InconsistentMetadata, OffsetOutOfRange, RecordBatchTooLarge
from storage.files import decode_uuid, encode_uuid, fsync_dir, read_key_values, write_key_values
from storage.leader_epoch import LeaderEpochCache
from storage.producer_state import ProducerStateManager, snapshot_name
from storage.segment import DELETED_SUFFIX, LOG_SUFFIX, LogSegment, Truncation
from storage.txn_index import TXN_INDEX_SUFFIX, AbortedTxn

PARTITION_METADATA = "partition.metadata"
# the log cleaner writes <base>.log.cleaned, renames it <base>.log.swap (the commit point), then <base>.log
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
DELETE_SUFFIX = "-delete"
# Offsets inside a segment are stored relative to its base offset in 32 bits.
MAX_RELATIVE_OFFSET = 0xFFFFFFFF

_PARTITION_DIR = re.compile(r"(.+)-(\d+)")
_SEGMENT_FILE = re.compile(r"\d{20}" + re.escape(LOG_SUFFIX))


def partition_dir_name(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


def bytes_to_recover(directory: Path, recovery_point: int) -> int:
    """Size of the segments a recovery from ``recovery_point`` checks: the one holding it and all later ones."""
    segments = sorted((int(p.name[:20]), p) for p in directory.iterdir() if _SEGMENT_FILE.fullmatch(p.name))
    first = max((i for i, (base, _) in enumerate(segments) if base <= recovery_point), default=0)
    return sum(path.stat().st_size for _, path in segments[first:])


def parse_partition_dir(name: str) -> tuple[str, int] | None:
    """(topic, partition) from a ``<topic>-<partition>`` directory name, else None."""
    match = _PARTITION_DIR.fullmatch(name)
    return (match[1], int(match[2])) if match else None


def read_topic_id(directory: Path) -> uuid.UUID | None:
    """The topic id in a partition directory's partition.metadata, None if there is none."""
    path = directory / PARTITION_METADATA
    if not path.exists():
        return None
    fields = read_key_values(path, ":")
    if "topic_id" not in fields:
        return None  # a creation cut short by a crash (the file is not fsynced); written again
    try:
        return decode_uuid(fields["topic_id"])
    except ValueError:
        raise InconsistentMetadata(f"unreadable {path}") from None


def _segment_base(segment: LogSegment) -> int:
    return segment.base_offset


class Log:
    """One partition directory ``<log_dir>/<topic>-<partition>/``.

    The high watermark is the log end offset unless a replicated partition
    sets it (``set_high_watermark``): then it is the offset every in-sync
    replica has reached, and readers see nothing at or past it.
    The recovery point is the offset below which everything was fsynced; an
    unclean start CRC-checks the segments from the one holding it on, and
    ``repairs`` lists what loading had to fix.

    The last stable offset is where the earliest open transaction began (the
    high watermark when none is open or it began past the high watermark);
    read_committed readers get nothing at or past it. Each segment's
    transaction index lists the transactions aborted by a marker in that segment.
    """

    def __init__(
        self,
        directory: Path,
        config: LogConfig,
        *,
        recovery_point: int = 0,
        log_start_offset: int = 0,
        needs_recovery: bool = False,
        topic_id: uuid.UUID | None = None,
        now_ms: int | None = None,
        on_segment_recovered: Callable[[int], None] | None = None,
    ) -> None:
        parsed = parse_partition_dir(directory.name)
        if parsed is None:
            raise ValueError(f"{directory.name} is not a <topic>-<partition> directory name")
        self.directory = directory
        self.topic, self.partition = parsed
        self.config = config
        self.repairs: list[str] = []
        now_ms = clock.wall_ms() if now_ms is None else now_ms
        self._last_flush_ms = now_ms
        self._dir_dirty = False
        directory.mkdir(parents=True, exist_ok=True)
        self.topic_id = self._init_topic_id(topic_id)
        self._segments: list[LogSegment] = []
        self.recovery_point = recovery_point
        self._load_segments(needs_recovery, now_ms, on_segment_recovered)
        # DeleteRecords can put the log start inside the first segment; retention only at a segment base
        self._log_start_offset = min(max(log_start_offset, self._segments[0].base_offset), self.log_end_offset)
        if needs_recovery:
            self.flush(now_ms)  # what recovery kept is now durable
        self.recovery_point = self.log_end_offset
        self._high_watermark: int | None = None
        self.producer_state = ProducerStateManager(directory)
        self._load_producer_state(now_ms, rebuild_txn_indexes=not self._load_txn_indexes())
        self.leader_epochs = LeaderEpochCache(directory)
        self._load_leader_epochs()
        # told when what a reader sees may have changed (offsets, records, the log gone): fetch sessions
        # read only the partitions of theirs that changed
        self.watchers: dict[object, Callable[[], None]] = {}

    # --- opening -----------------------------------------------------------

    def _init_topic_id(self, topic_id: uuid.UUID | None) -> uuid.UUID | None:
        stored = read_topic_id(self.directory)
        if stored is None and topic_id is not None:
            write_key_values(
                self.directory / PARTITION_METADATA, {"version": "0", "topic_id": encode_uuid(topic_id)}, ": ",
                sync=False,  # the topic catalog is what makes a topic durable
            )
            return topic_id
        if topic_id is not None and stored != topic_id:
            raise InconsistentMetadata(f"{self.name} belongs to topic id {stored}, not {topic_id}")
        return stored

    def _load_segments(self, needs_recovery: bool, now_ms: int,
                       on_segment_recovered: Callable[[int], None] | None) -> None:
        """Open the segments; with ``needs_recovery`` check those from the recovery point on, telling
        ``on_segment_recovered`` each one's size (recovery progress)."""
        for leftover in self.directory.glob("*" + DELETED_SUFFIX):
            leftover.unlink()  # removed by retention; the crash came before file.delete.delay.ms ran out
        for cleaned in self.directory.glob("*" + LOG_SUFFIX + CLEANED_SUFFIX):
            cleaned.unlink()
            self.repairs.append(f"discarded the unfinished cleaning of {cleaned.name[:-len(CLEANED_SUFFIX)]}; "
                                "the segment stays as it was")
        for swap in self.directory.glob("*" + LOG_SUFFIX + SWAP_SUFFIX):
            self._complete_swap(swap)
            self._dir_dirty = True
            self.repairs.append(f"completed the swap of the cleaned {swap.name[:-len(SWAP_SUFFIX)]}")
        for suffix in (CLEANED_SUFFIX, SWAP_SUFFIX):  # transaction indexes of cleanings that did not commit
            for leftover in self.directory.glob("*" + TXN_INDEX_SUFFIX + suffix):
                leftover.unlink()
        bases = sorted(int(p.name[:20]) for p in self.directory.iterdir() if _SEGMENT_FILE.fullmatch(p.name))
        if not bases:
            self._segments.append(self._new_segment(0, now_ms))
            return
        interval = self.config.index_interval_bytes
        self._segments = [LogSegment(self.directory, base, interval, now_ms) for base in bases]
        recover_from = self._segment_index(self.recovery_point) if needs_recovery else len(self._segments)
        for i, segment in enumerate(self._segments):
            truncation = segment.recover() if i >= recover_from else self._load_flushed(segment)
            if i >= recover_from and on_segment_recovered:
                on_segment_recovered(segment.size)
            if truncation is not None:
                self.repairs.append(str(truncation))
                # Later segments start after the damage, so they cannot be trusted to follow on.
                dropped = self._drop_segments_after(i)
                if dropped:
                    self.repairs.append(f"deleted {len(dropped)} later segment(s): {', '.join(dropped)}")
                break

    def _load_flushed(self, segment: LogSegment) -> Truncation | None:
        try:
            self.repairs.extend(segment.load())
            return None
        except CorruptRecord as exc:
            self.repairs.append(f"{segment.name} was damaged although it had been flushed ({exc})")
            return segment.recover()

    def _load_txn_indexes(self) -> bool:
        """Read every segment's aborted transactions; False if one is damaged."""
        for segment in self._segments:
            try:
                segment.txn_index.load()
            except CorruptIndex as exc:
                self.repairs.append(f"rebuilding the transaction indexes ({exc})")
                return False
        return True

    def _load_producer_state(self, now_ms: int, rebuild_txn_indexes: bool = False) -> None:
        """Producer state from the newest snapshot and the batches after it.

        The transaction index entries from the snapshot on are rebuilt on the
        way, so they agree with the log whatever a crash left in the files;
        damaged indexes are rebuilt from the log start.
        """
        start, repairs = self.producer_state.load_snapshot(self.log_end_offset)
        self.repairs.extend(repairs)
        if rebuild_txn_indexes:
            self.producer_state.clear()
            start = self.log_start_offset
        for segment in self._segments:
            if rebuild_txn_indexes:
                segment.txn_index.delete()
            else:
                segment.txn_index.truncate_from(start)
        for segment, position in self._positions_from(start):
            for at, hdr in segment.headers(position):
                if hdr.producer_id == NO_PRODUCER_ID:
                    continue
                if not hdr.is_control:
                    self.producer_state.add_batch(hdr, now_ms)
                    continue
                try:
                    marker = read_control_marker(segment.read_batch(at, hdr))
                except CorruptRecord as exc:
                    self.repairs.append(f"ignored the unreadable marker at offset {hdr.base_offset} ({exc})")
                    continue
                self._complete_txn(segment, hdr, marker.type == CONTROL_COMMIT, marker.coordinator_epoch, now_ms)
        self.producer_state.truncate_head(self.log_start_offset)  # a snapshot may predate the log start

    def _load_leader_epochs(self) -> None:
        """Drop checkpoint entries past the recovered log end; rebuild a missing checkpoint from the batches."""
        cache = self.leader_epochs
        if cache.loaded:
            cache.truncate_from_end(self.log_end_offset)
            return
        for segment, position in self._positions_from(self.log_start_offset):
            for _, hdr in segment.headers(position):
                cache.assign(hdr.leader_epoch, hdr.base_offset, persist=False)
        if cache.entries:
            cache._write()

    def _new_segment(self, base_offset: int, now_ms: int) -> LogSegment:
        self._dir_dirty = True
        return LogSegment(self.directory, base_offset, self.config.index_interval_bytes, now_ms, create=True)

    def _drop_segments_after(self, i: int) -> list[str]:
        dropped = self._segments[i + 1 :]
        for segment in dropped:
            segment.delete()
        del self._segments[i + 1 :]
        if dropped:
            self._dir_dirty = True
        return [segment.name for segment in dropped]

    def _segment_index(self, offset: int) -> int:
        """Index of the segment that holds ``offset`` (the first one for offsets below the log start)."""
        return max(bisect_right(self._segments, offset, key=_segment_base) - 1, 0)

    # --- state -------------------------------------------------------------

    @property
    def name(self) -> str:
        return partition_dir_name(self.topic, self.partition)

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        """The next offset to assign: the offset after the last record of the last batch."""
        return self._segments[-1].next_offset

    @property
    def high_watermark(self) -> int:
        end = self._segments[-1].next_offset  # (the log end offset; a fetch asks this of every partition)
        high_watermark = self._high_watermark
        return end if high_watermark is None or high_watermark > end else high_watermark

    def set_high_watermark(self, offset: int) -> None:
        if offset != self._high_watermark:  # a follower sets it after every fetch, moved or not
            self._high_watermark = offset
            self.notify_watchers()

    def notify_watchers(self) -> None:
        for notify in self.watchers.values():
            notify()

    @property
    def last_stable_offset(self) -> int:
        first_unstable = self.producer_state.first_unstable_offset
        high_watermark = self.high_watermark
        return high_watermark if first_unstable is None else min(first_unstable, high_watermark)

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    @property
    def segments(self) -> tuple[LogSegment, ...]:
        return tuple(self._segments)

    @property
    def size_bytes(self) -> int:
        return sum(segment.size for segment in self._segments)

    @property
    def repair_summary(self) -> str | None:
        """e.g. "orders-0: truncated 37 bytes of 00000000000000000000.log at offset 1200 (CRC32C mismatch)"."""
        return f"{self.name}: {'; '.join(self.repairs)}" if self.repairs else None

    # --- writing -----------------------------------------------------------

    def append(
        self,
        buf: bytearray,
        batches: list[tuple[int, BatchHeader]],
        now_ms: int,
        from_coordinator: bool = False,
        leader_epoch: int = 0,
    ) -> tuple[int, int]:
        """Assign offsets to validated batches in ``buf`` and store them; returns (first, last) offset.

        ``batches`` are the (position, header) pairs parsed from ``buf``. The
        base offsets (and for LogAppendTime topics the timestamps) are
        rewritten in place, then ``buf`` is written with one syscall. An
        OSError leaves the log as it was and propagates.

        Batches of idempotent producers are checked against the producer
        state first: a refused batch raises a ProducerStateError, and a
        retry of a stored batch is not stored again -- its original offsets
        are returned. The group coordinator's writes for a producer
        (``from_coordinator``) are checked for the epoch only.
        """
        if not batches:
            raise ValueError("nothing to append")
        duplicate = self.producer_state.check(batches, from_coordinator)
        if duplicate is not None:
            return duplicate.first_offset, duplicate.last_offset
        stored = self._write(buf, batches, now_ms, leader_epoch)
        self.producer_state.update(stored, now_ms)
        self._flush_if_full(now_ms)
        return stored[0][1].base_offset, stored[-1][1].last_offset

    def append_marker(
        self,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        committed: bool,
        now_ms: int,
        leader_epoch: int = 0,
    ) -> int:
        """Write a producer's commit or abort marker (WriteTxnMarkers); returns its offset.

        Markers carry no sequence, so one sent again after a coordinator
        restart is simply stored again and ends nothing. A marker of an older
        producer epoch or coordinator epoch raises a ProducerStateError.
        """
        self.producer_state.check_marker(producer_id, producer_epoch, coordinator_epoch)
        marker = CONTROL_COMMIT if committed else CONTROL_ABORT
        buf = bytearray(control_batch(marker, producer_id, producer_epoch, coordinator_epoch, now_ms))
        ((_, hdr),) = self._write(buf, [(0, read_header(buf))], now_ms, leader_epoch)
        self._complete_txn(self.active_segment, hdr, committed, coordinator_epoch, now_ms)
        self._flush_if_full(now_ms)
        return hdr.base_offset

    def _complete_txn(
        self, segment: LogSegment, marker: BatchHeader, committed: bool, coordinator_epoch: int, now_ms: int
    ) -> None:
        """Apply a stored marker: end the producer's transaction, indexing it if it was aborted."""
        first_offset = self.producer_state.complete_txn(
            marker.producer_id, marker.producer_epoch, coordinator_epoch, now_ms
        )
        if first_offset is not None and not committed:
            first_unstable = self.producer_state.first_unstable_offset
            stable = marker.next_offset if first_unstable is None else first_unstable
            segment.txn_index.append(AbortedTxn(marker.producer_id, first_offset, marker.base_offset, stable))

    def append_as_follower(self, buf, batches: list[tuple[int, BatchHeader]], now_ms: int) -> None:
        """Store a leader's batches byte for byte, offsets and leader epochs as the leader assigned them.

        The producer state and the transaction index are rebuilt from the batch headers and markers, as
        on recovery, so a follower that becomes leader dedups retries and serves read_committed the same.
        """
        if batches[0][1].base_offset != self.log_end_offset:
            raise ValueError(f"{self.name}: leader batch at {batches[0][1].base_offset}, log end {self.log_end_offset}")
        incoming_timestamp = max(hdr.max_timestamp for _, hdr in batches)
        if self._should_roll(len(buf), batches[-1][1].last_offset, incoming_timestamp, now_ms):
            self._roll(now_ms)
        segment = self.active_segment
        segment.append(buf, batches)
        for position, hdr in batches:
            self.leader_epochs.assign(hdr.leader_epoch, hdr.base_offset)
            if hdr.producer_id == NO_PRODUCER_ID:
                continue
            if hdr.is_control:
                marker = read_control_marker(bytes(buf[position : position + hdr.size]))
                self._complete_txn(segment, hdr, marker.type == CONTROL_COMMIT, marker.coordinator_epoch, now_ms)
            else:
                self.producer_state.add_batch(hdr, now_ms)
        self._flush_if_full(now_ms)
        self.notify_watchers()

    def _write(self, buf: bytearray, batches: list[tuple[int, BatchHeader]], now_ms: int, leader_epoch: int) -> list:
        """Assign offsets and the leader epoch, roll if due and write; returns (position, header as stored)."""
        self.leader_epochs.assign(leader_epoch, self.log_end_offset)
        next_offset = self.log_end_offset
        stamp = self.config.log_append_time
        stored = []
        for position, hdr in batches:
            # a marker always goes in, in a segment of its own if need be: its transaction would hang otherwise
            if hdr.size > self.config.segment_bytes and not hdr.is_control:
                raise RecordBatchTooLarge(
                    f"batch of {hdr.size} bytes exceeds segment.bytes {self.config.segment_bytes} of {self.name}"
                )
            set_base_offset(buf, position, next_offset)
            set_leader_epoch(buf, position, leader_epoch)
            if stamp:
                set_log_append_time(buf, position, hdr, now_ms)
                hdr = hdr._replace(base_offset=next_offset, leader_epoch=leader_epoch, max_timestamp=now_ms)
            else:
                hdr = hdr._replace(base_offset=next_offset, leader_epoch=leader_epoch)
            stored.append((position, hdr))
            next_offset = hdr.next_offset
        incoming_timestamp = max(hdr.max_timestamp for _, hdr in stored)
        if self._should_roll(len(buf), next_offset - 1, incoming_timestamp, now_ms):
            self._roll(now_ms)
        self.active_segment.append(buf, stored)
        self.notify_watchers()
        return stored

    def _flush_if_full(self, now_ms: int) -> None:
        flush_messages = self.config.flush_interval_messages
        if flush_messages is not None and self.log_end_offset - self.recovery_point >= flush_messages:
            self.flush(now_ms)

    def _should_roll(self, size: int, last_offset: int, incoming_timestamp: int, now_ms: int) -> bool:
        active = self.active_segment
        if active.size == 0:
            return False
        return (
            active.size + size > self.config.segment_bytes
            or active.time_waited_for_roll(now_ms, incoming_timestamp) > self.config.segment_ms
            or last_offset - active.base_offset > MAX_RELATIVE_OFFSET
        )

    def _roll(self, now_ms: int) -> None:
        self.active_segment.seal()
        self.producer_state.take_snapshot(self.log_end_offset)
        self._segments.append(self._new_segment(self.log_end_offset, now_ms))

    def truncate_to(self, offset: int) -> None:
        """Drop everything from the batch holding ``offset`` on; the log end offset becomes its base offset."""
        if offset >= self.log_end_offset:
            # no record goes, but an epoch begun at the end and never written in does (a leadership lost
            # before its first append): a follower would go on naming it to its leader, which answers with the
            # same divergence every time (Kafka's truncateTo cuts the epoch cache here too)
            if self.leader_epochs.truncate_from_end(self.log_end_offset):
                self.notify_watchers()
            return
        if offset < self.log_start_offset:
            raise OffsetOutOfRange(f"cannot truncate {self.name} to {offset} below its start {self.log_start_offset}")
        i = self._segment_index(offset)
        self._drop_segments_after(i)
        segment = self._segments[i]
        found = segment.find_position(offset)
        if found is not None:
            segment.truncate_to(found[0])
        self.recovery_point = min(self.recovery_point, self.log_end_offset)
        self.leader_epochs.truncate_from_end(self.log_end_offset)
        if self._high_watermark is not None:
            self._high_watermark = min(self._high_watermark, self.log_end_offset)
        self._load_producer_state(clock.wall_ms())
        self.notify_watchers()

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Drop every record and begin empty at ``offset``: a follower whose log ends below the leader's
        log start (Kafka's truncateFullyAndStartAt)."""
        for segment in self._segments:
            segment.delete()
        self._segments = [self._new_segment(offset, clock.wall_ms())]
        self._log_start_offset = self.recovery_point = offset
        self._high_watermark = offset
        self.producer_state.clear()
        for old in self.producer_state.snapshot_offsets():
            (self.directory / snapshot_name(old)).unlink()
        self.leader_epochs.clear()
        self.notify_watchers()

    # --- retention ---------------------------------------------------------

    def advance_log_start(self, offset: int) -> bool:
        """Move the log start offset up to ``offset`` (never past the log end); True if it moved.

        Reads below it answer OFFSET_OUT_OF_RANGE at once; the segments wholly below
        it go with the next ``delete_old_segments``. DeleteRecords, retention and a
        follower taking the leader's log start offset from a fetch response come here
        (Kafka's maybeIncrementLogStartOffset).
        """
        offset = min(offset, self.log_end_offset)
        if offset <= self._log_start_offset:
            return False
        self._log_start_offset = offset
        self.producer_state.truncate_head(offset)
        self.notify_watchers()
        return True

    def delete_old_segments(self, now_ms: int) -> list[Path]:
        """Remove the oldest segments that lie wholly below the log start offset or, with
        cleanup.policy delete, past retention.ms or retention.bytes; never the active one.

        The files are renamed to ``*.deleted`` (returned, for removal after
        file.delete.delay.ms) and the log start offset moves to the new first segment.
        """
        count = self._deletable(lambda segment, next_base: next_base <= self._log_start_offset)
        if self.config.delete:
            retention_ms = self.config.retention_ms
            if retention_ms >= 0:
                expired = self._deletable(lambda segment, _: now_ms - segment.largest_timestamp() > retention_ms)
                count = max(count, expired)
            if self.config.retention_bytes >= 0:
                count = max(count, self._over_retention_bytes())
        if not count:
            return []
        doomed, self._segments = self._segments[:count], self._segments[count:]
        self._dir_dirty = True
        renamed = [path for segment in doomed for path in segment.mark_deleted()]
        self.advance_log_start(self._segments[0].base_offset)
        return renamed

    def _deletable(self, predicate) -> int:
        """How many segments from the oldest on match ``predicate(segment, next segment's base offset)``:
        only whole segments below the high watermark, never the active one (Kafka's rule)."""
        count = 0
        for segment, following in zip(self._segments, self._segments[1:], strict=False):
            if following.base_offset > self.high_watermark or not predicate(segment, following.base_offset):
                break
            count += 1
        return count

    def _over_retention_bytes(self) -> int:
        excess = self.size_bytes - self.config.retention_bytes

        def fits(segment: LogSegment, _: int) -> bool:
            nonlocal excess
            if excess < segment.size:
                return False
            excess -= segment.size
            return True

        return self._deletable(fits)

    # --- cleaning ----------------------------------------------------------

    def replace_segments(self, cleaned: list[tuple[LogSegment, int, Path]]) -> int:
        """Make the log cleaner's files (fsynced) the segments they were cleaned from; returns how many.

        ``cleaned`` holds (segment, its size when it was cleaned, cleaned file). A segment that is
        no longer in the log or has another size (retention or truncation came first) keeps its
        data, and its file is left to the caller. One directory fsync commits every swap.
        """
        positions = {id(s): i for i, s in enumerate(self._segments[:-1])}
        current = [(segment, path) for segment, size, path in cleaned
                   if id(segment) in positions and segment.size == size]
        swaps = []
        for segment, path in current:
            txn_index = segment.txn_index.path
            cleaned_txn_index = txn_index.with_name(txn_index.name + CLEANED_SUFFIX)
            if cleaned_txn_index.exists():  # renamed first: a log .swap finds its index ready
                cleaned_txn_index.rename(txn_index.with_name(txn_index.name + SWAP_SUFFIX))
            swaps.append(segment.log_path.with_name(segment.log_path.name + SWAP_SUFFIX))
            path.rename(swaps[-1])
        fsync_dir(self.directory)  # the commit point: a crash from here on completes each swap
        for (segment, _), swap in zip(current, swaps, strict=False):
            segment.close()
            self._complete_swap(swap)
        fsync_dir(self.directory)
        for segment, _ in current:
            replacement = LogSegment(self.directory, segment.base_offset, self.config.index_interval_bytes, clock.wall_ms())
            replacement.rebuild_indexes()
            replacement.txn_index.load()
            self._segments[positions[id(segment)]] = replacement
        return len(current)

    def _complete_swap(self, swap: Path) -> None:
        """Replace a segment by its cleaned ``.swap`` file (and its transaction index by its
        ``.swap``, if the cleaning changed it); the offset and time indexes are derived again."""
        log_path = swap.with_name(swap.name[: -len(SWAP_SUFFIX)])
        for suffix in (".index", ".timeindex"):
            log_path.with_suffix(suffix).unlink(missing_ok=True)
        txn_index = log_path.with_suffix(TXN_INDEX_SUFFIX)
        txn_swap = txn_index.with_name(txn_index.name + SWAP_SUFFIX)
        if txn_swap.exists():
            os.replace(txn_swap, txn_index)
        os.replace(swap, log_path)

    # --- reading -----------------------------------------------------------

    def read(self, offset: int, max_bytes: int, max_offset: int | None = None, min_one: bool = True) -> bytes:
        """Whole stored batches from the one holding ``offset`` (which may start before it).

        With ``min_one`` the first batch is returned even if it alone exceeds
        ``max_bytes`` (KIP-74); batches stop before the total would exceed
        ``max_bytes``. No batch whose base offset is >= ``max_offset`` (the
        high watermark or the last stable offset) is returned. A read never
        spans two segments.
        """
        return self._read(offset, max_bytes, max_offset, min_one)[0]

    def read_committed(self, offset: int, max_bytes: int, min_one: bool = True) -> tuple[bytes, list[AbortedTxn]]:
        """A read_committed read: batches below the last stable offset, and the aborted
        transactions among them (whose records the reader skips)."""
        data, segment, position = self._read(offset, max_bytes, self.last_stable_offset, min_one)
        if not data:
            return data, []
        return data, self.aborted_transactions(offset, segment.offset_at(position + len(data)))

    def aborted_transactions(self, start: int, end: int) -> list[AbortedTxn]:
        """The aborted transactions with records in offsets [start, end)."""
        found: list[AbortedTxn] = []
        for segment in self._segments[self._segment_index(start) :]:
            if segment.txn_index.collect(start, end, found):
                break
        return found

    def _read(
        self, offset: int, max_bytes: int, max_offset: int | None, min_one: bool = True
    ) -> tuple[bytes, LogSegment | None, int]:
        """(data, the segment it came from, its position there) for ``read``."""
        segments = self._segments
        end = segments[-1].next_offset
        if not self._log_start_offset <= offset <= end:
            raise OffsetOutOfRange(f"offset {offset} outside [{self._log_start_offset}, {end}] of {self.name}")
        limit = end if max_offset is None or max_offset > end else max_offset
        # a reader near the end (most fetches) is in the active segment: no search
        first = len(segments) - 1 if offset >= segments[-1].base_offset else self._segment_index(offset)
        for i in range(first, len(segments)):
            segment = segments[i]
            position = segment.batch_position(offset)
            if position is None:
                continue
            # a batch at or past the limit ends the read where it starts: nothing is returned
            return segment.read(position, max_bytes, self._end_position(segment, limit), min_one), segment, position
        return b"", None, 0

    @staticmethod
    def _end_position(segment: LogSegment, limit: int) -> int:
        """File position where the first batch with base offset >= ``limit`` starts."""
        if limit >= segment.next_offset:
            return segment.size
        found = segment.find_position(limit)
        if found is None:
            return segment.size
        position, hdr = found
        return position if hdr.base_offset >= limit else position + hdr.size

    def _positions_from(self, offset: int) -> Iterator[tuple[LogSegment, int]]:
        """Each segment from the one holding ``offset`` on, with the position to read it from."""
        for segment in self._segments[self._segment_index(offset) :]:
            found = segment.find_position(offset)
            if found is not None:
                yield segment, found[0]

    def batches(self, from_offset: int = 0) -> Iterator[tuple[BatchHeader, bytes]]:
        """Every stored batch from the one holding ``from_offset`` on, with its bytes."""
        for segment, position in self._positions_from(from_offset):
            yield from segment.batches(position)

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with a timestamp >= ``timestamp`` (ListOffsets)."""
        for segment in self._segments:
            found = segment.find_timestamp(timestamp)
            if found is not None:
                offset, ts = self._first_record_at_or_after(segment, *found, timestamp)
                return max(offset, self.log_start_offset), ts
        return None

    def max_timestamp(self) -> tuple[int, int] | None:
        """(offset, timestamp) of the record with the largest timestamp; None for an empty log."""
        if self.log_end_offset == self.log_start_offset:
            return None
        segment = max(self._segments, key=lambda s: s.max_timestamp)
        found = segment.find_position(segment.offset_of_max_timestamp)
        if found is None:
            return None
        return self._first_record_at_or_after(segment, *found, segment.max_timestamp)

    @staticmethod
    def _first_record_at_or_after(
        segment: LogSegment, position: int, hdr: BatchHeader, timestamp: int
    ) -> tuple[int, int]:
        """Narrow a batch down to its first record at or after ``timestamp``.

        LogAppendTime batches give every record the batch's time, so they
        answer with the batch's base offset and max timestamp.
        """
        if not hdr.attributes & TIMESTAMP_TYPE_BIT:
            try:
                for record in iter_records(segment.read(position, hdr.size, position + hdr.size)):
                    if record.timestamp >= timestamp:
                        return record.offset, record.timestamp
            except CorruptRecord:
                pass  # the batch's CRC held but its records do not parse; answer for the batch
        return hdr.base_offset, hdr.max_timestamp

    # --- durability and lifecycle -------------------------------------------

    def flush(self, now_ms: int | None = None) -> None:
        """fsync everything after the recovery point and move the recovery point to the log end."""
        if self.recovery_point < self.log_end_offset:
            for segment in self._segments[self._segment_index(self.recovery_point) :]:
                segment.flush()
        if self._dir_dirty and self.log_end_offset > 0:  # an empty log's files lose nothing if a crash drops them
            fsync_dir(self.directory)
            self._dir_dirty = False
        self.recovery_point = self.log_end_offset
        self._last_flush_ms = clock.wall_ms() if now_ms is None else now_ms

    def flush_if_due(self, now_ms: int) -> bool:
        """Flush if flush.ms has passed since the last flush and there is unflushed data."""
        interval = self.config.flush_interval_ms
        if interval is None or self.recovery_point >= self.log_end_offset or now_ms - self._last_flush_ms < interval:
            return False
        self.flush(now_ms)
        return True

    def close(self) -> None:
        self.flush()
        self.producer_state.take_snapshot(self.log_end_offset)
        for segment in self._segments:
            segment.close()

    def delete(self) -> None:
        """Close the log and remove its directory (renamed first, so a crash leaves no half-deleted log)."""
        for segment in self._segments:
            segment.close()
        self.notify_watchers()
        doomed = self.directory.with_name(f"{self.directory.name}.{uuid.uuid4().hex}{DELETE_SUFFIX}")
        self.directory.rename(doomed)
        fsync_dir(self.directory.parent)
        shutil.rmtree(doomed)
