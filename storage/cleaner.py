"""The log cleaner: compaction of logs whose cleanup.policy includes compact.

A pass over one log has three steps:

1. ``choose`` (on the event loop) picks the log with the largest dirty share
   and fixes what to clean: every whole segment below the first uncleanable
   offset -- the active segment, the last stable offset, the high watermark
   and min.compaction.lag.ms each bound it.
2. ``clean`` (on a cleaner thread) reads those segments through descriptors
   of its own, builds a map from each key to its latest offset in the dirty
   part (from the cleaner checkpoint on), and writes ``<base>.log.cleaned``
   for every segment that loses records. Batches are copied as bytes; only a
   batch that loses some records is re-encoded (same offsets; see filter_batch).
3. ``swap`` (on the event loop) makes each cleaned file the segment, unless
   retention, truncation or a topic deletion changed the segment meanwhile.

A record goes if a later record has its key, if it has no key, if it belongs
to an aborted transaction, or if it is a tombstone in a segment older than
delete.retention.ms. A transaction marker goes once no batch of its
transaction is left and its segment is older than delete.retention.ms
(Kafka's rule); an abort marker takes its transaction index entry with it,
since a read_committed reader told of an aborted transaction skips that
producer's records until it meets the marker. A producer's last batch is
kept, emptied if need be, so its state can always be rebuilt from the log
(and the marker of its last transaction stays). Offsets never change.

Reads and writes together are held to log.cleaner.io.max.bytes.per.second.
How far each log has been cleaned is kept in ``cleaner-offset-checkpoint``.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

from protocol.records import (
    HEADER_SIZE,
    NO_PRODUCER_ID,
    filter_batch,
    iter_records,
    read_header,
)
from storage import clock
from storage.log import CLEANED_SUFFIX, Log
from storage.log_manager import LogManager
from storage.segment import BATCH_CHUNK, LogSegment, whole_batches_length
from storage.txn_index import AbortedTxn, TransactionIndex

TopicPartition = tuple[str, int]


class CleaningStopped(Exception):
    """The broker is shutting down: the pass is abandoned, its segments stay as they were."""


class Throttler:
    """Holds the bytes all cleaner threads read and write to a rate (bytes per second)."""

    def __init__(self, rate: float, stopped: threading.Event) -> None:
        self.rate = rate
        self.stopped = stopped
        self._lock = threading.Lock()
        self._start = clock.monotonic()
        self._bytes = 0.0

    def set_rate(self, rate: float) -> None:
        """A new rate (log.cleaner.io.max.bytes.per.second changed at run time), from a fresh window."""
        with self._lock:
            self.rate, self._start, self._bytes = rate, clock.monotonic(), 0.0

    def take(self, count: int) -> None:
        """Account for ``count`` bytes, sleeping while the threads are ahead of the rate."""
        with self._lock:
            self._bytes += count
            now = clock.monotonic()
            due = self._start + self._bytes / self.rate
            if now - self._start > 1.0 and due <= now:  # a fresh window once the rate is kept
                self._start, self._bytes = now, 0.0
        if due > now:
            self.stopped.wait(due - now)
        if self.stopped.is_set():
            raise CleaningStopped()


@dataclass
class _Source:
    """A segment to clean, as it was when the pass was chosen."""

    segment: LogSegment
    path: Path
    size: int
    largest_timestamp: int


@dataclass
class CleaningPass:
    key: TopicPartition
    log: Log
    sources: list[_Source]
    first_dirty: int
    end: int  # the first uncleanable offset: everything cleaned lies below it
    delete_horizon_ms: int  # tombstones in segments older than this go
    aborted: list[AbortedTxn]
    last_batches: dict[int, int]  # producer id -> last offset of its last batch
    cleaned: list[tuple[_Source, Path]] = field(default_factory=list)
    # producer id -> whether a batch of its transaction under way (in log order) is kept
    txn_kept: dict[int, bool] = field(default_factory=dict)
    bytes_read: int = 0
    bytes_written: int = 0
    records_removed: int = 0


class LogCleaner:
    def __init__(self, logs: LogManager, max_bytes_per_second: float, max_keys: int = 1 << 62) -> None:
        self.logs = logs
        self.max_keys = max_keys  # keys one pass may map; a dirty part with more is cleaned in several passes
        self.stopped = threading.Event()
        self.throttler = Throttler(max_bytes_per_second, self.stopped)
        self.busy: set[TopicPartition] = set()

    # --- choosing (event loop) --------------------------------------------

    def choose(self, now_ms: int) -> CleaningPass | None:
        """The compacted log most in need of cleaning, or None if none is due."""
        best, best_ratio = None, -1.0
        for key, log in self.logs.logs.items():
            if key in self.busy or not log.config.compact:
                continue
            found = self._plan(key, log, now_ms)
            if found is None:
                continue
            ratio, plan = found
            if ratio > best_ratio:
                best, best_ratio = plan, ratio
        if best is not None:
            self.busy.add(best.key)
        return best

    def _plan(self, key: TopicPartition, log: Log, now_ms: int) -> tuple[float, CleaningPass] | None:
        config = log.config
        segments = log.segments
        bound = min(log.last_stable_offset, log.high_watermark, segments[-1].base_offset)
        sources: list[_Source] = []
        for segment, following in zip(segments, segments[1:], strict=False):
            largest = segment.largest_timestamp()
            if following.base_offset > bound or now_ms - largest < config.min_compaction_lag_ms:
                break
            sources.append(_Source(segment, segment.log_path, segment.size, largest))
        if not sources:
            return None
        end = segments[len(sources)].base_offset
        first_dirty = max(self.logs.first_dirty_offsets.get(key, 0), log.log_start_offset)
        dirty = [s for s in sources if s.segment.next_offset > first_dirty]
        if not dirty:
            return None
        ratio = sum(s.size for s in dirty) / max(sum(s.size for s in sources), 1)
        overdue = now_ms - min(s.largest_timestamp for s in dirty) > config.max_compaction_lag_ms
        if ratio < config.min_cleanable_dirty_ratio and not overdue:
            return None
        last_batches = {pid: e.batches[-1].last_offset for pid, e in log.producer_state.producers.items() if e.batches}
        return ratio, CleaningPass(
            key, log, sources, first_dirty, end, now_ms - config.delete_retention_ms,
            log.aborted_transactions(log.log_start_offset, end), last_batches,
        )

    # --- cleaning (a cleaner thread) ----------------------------------------

    def clean(self, plan: CleaningPass) -> CleaningPass:
        """Write the cleaned segments of ``plan`` (``*.log.cleaned``, fsynced); runs off the event loop."""
        latest: dict[bytes, int] = {}
        for i, source in enumerate(plan.sources):
            if source.segment.next_offset <= plan.first_dirty:
                continue
            found: dict[bytes, int] = {}
            for hdr, batch in self._batches(plan, source):
                if hdr.is_control or hdr.base_offset < plan.first_dirty or _aborted(plan, hdr):
                    continue
                found.update((r.key, r.offset) for r in iter_records(batch) if r.key is not None)
            if latest and len(latest) + len(found) > self.max_keys:
                # the map is full (log.cleaner.dedupe.buffer.size): this pass ends below this segment
                plan.sources, plan.end = plan.sources[:i], source.segment.base_offset
                break
            latest.update(found)
        for source in plan.sources:
            self._clean_segment(plan, source, latest)
        return plan

    def _clean_segment(self, plan: CleaningPass, source: _Source, latest: dict[bytes, int]) -> None:
        expired = source.largest_timestamp < plan.delete_horizon_ms

        def keep(record) -> bool:
            newest = latest.get(record.key)
            keeps = (record.key is not None and (newest is None or record.offset >= newest)
                     and (record.value is not None or not expired))
            plan.records_removed += not keeps
            return keeps

        out: list[bytes] = []
        changed = False
        dropped_markers: set[int] = set()
        for hdr, batch in self._batches(plan, source):
            last = hdr.producer_id != NO_PRODUCER_ID and plan.last_batches.get(hdr.producer_id) == hdr.last_offset
            if hdr.is_control:
                kept = None if expired and not plan.txn_kept.pop(hdr.producer_id, False) else batch
                if kept is None:
                    dropped_markers.add(hdr.base_offset)
            elif _aborted(plan, hdr):
                plan.records_removed += hdr.records_count
                kept = filter_batch(batch, lambda r: False, keep_empty=True) if last else None
            else:
                kept = filter_batch(batch, keep, keep_empty=last)
            if hdr.is_transactional and not hdr.is_control:
                plan.txn_kept[hdr.producer_id] = plan.txn_kept.get(hdr.producer_id, False) or kept is not None
            changed |= kept is not batch
            if kept is not None:
                out.append(kept)
        if not changed:
            return
        if dropped_markers:
            self._write_txn_index(source, dropped_markers)
        cleaned = source.path.with_name(source.path.name + CLEANED_SUFFIX)
        data = b"".join(out)
        with open(cleaned, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        self.throttler.take(len(data))
        plan.bytes_written += len(data)
        plan.cleaned.append((source, cleaned))

    @staticmethod
    def _write_txn_index(source: _Source, dropped_markers: set[int]) -> None:
        """``<base>.txnindex.cleaned``: the segment's aborted transactions but those whose marker went."""
        index = TransactionIndex(source.segment.txn_index.path)
        index.load()
        cleaned = TransactionIndex(index.path.with_name(index.path.name + CLEANED_SUFFIX))
        open(cleaned.path, "wb").close()  # exists even when no entry is left: the swap empties the index
        for entry in index.entries:
            if entry.last_offset not in dropped_markers:
                cleaned.append(entry)
        cleaned.flush()
        cleaned.close()

    def _batches(self, plan: CleaningPass, source: _Source):
        """(header, bytes) of each batch of the segment as it was chosen, read through a descriptor of our own."""
        with open(source.path, "rb", buffering=0) as f:
            position = 0
            while position < source.size:
                chunk = os.pread(f.fileno(), min(max(BATCH_CHUNK, _first_size(f, position)), source.size - position),
                                 position)
                end = whole_batches_length(chunk)
                if end == 0:
                    raise OSError(f"{source.path.name}: unreadable batch at position {position}")
                self.throttler.take(end)
                plan.bytes_read += end
                at = 0
                while at < end:
                    hdr = read_header(chunk, at)
                    yield hdr, chunk[at : at + hdr.size]
                    at += hdr.size
                position += end

    # --- swapping (event loop) ------------------------------------------------

    def swap(self, plan: CleaningPass) -> int:
        """Make the cleaned files the segments; returns how many were swapped. Files of segments that
        changed meanwhile (or of a log deleted meanwhile) are discarded."""
        self.busy.discard(plan.key)
        still_open = self.logs.log(*plan.key) is plan.log
        swapped = 0
        try:
            if still_open:
                swapped = plan.log.replace_segments([(s.segment, s.size, path) for s, path in plan.cleaned])
        finally:
            self._remove_files(plan)  # those not swapped: their segments stay as they were
        if still_open:
            self.logs.cleaned_up_to(plan.key, plan.end)
        return swapped

    def discard(self, plan: CleaningPass) -> None:
        """A pass that failed: its files go, its segments stay as they were."""
        self.busy.discard(plan.key)
        self._remove_files(plan)

    @staticmethod
    def _remove_files(plan: CleaningPass) -> None:
        for source, cleaned in plan.cleaned:
            cleaned.unlink(missing_ok=True)
            txn_index = source.segment.txn_index.path
            txn_index.with_name(txn_index.name + CLEANED_SUFFIX).unlink(missing_ok=True)


def _first_size(f, position: int) -> int:
    return read_header(os.pread(f.fileno(), HEADER_SIZE, position)).size


def _aborted(plan: CleaningPass, hdr) -> bool:
    return hdr.is_transactional and any(
        a.producer_id == hdr.producer_id and a.first_offset <= hdr.base_offset <= a.last_offset for a in plan.aborted
    )
