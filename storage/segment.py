"""One segment of a partition log: a .log file of record batches, its two indexes and its aborted transactions."""

from __future__ import annotations

import os
import struct
from collections import OrderedDict
from pathlib import Path
from typing import Iterator, NamedTuple

from protocol.errors import CorruptRecord
from protocol.records import HEADER_SIZE, LOG_OVERHEAD, BatchHeader, check_batch, next_offset_at, read_header
from storage.errors import CorruptIndex
from storage.handles import FileHandle
from storage.index import OffsetIndex, TimeIndex
from storage.txn_index import TXN_INDEX_SUFFIX, TransactionIndex

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
# a segment removed by retention lingers under this suffix for file.delete.delay.ms
DELETED_SUFFIX = ".deleted"

NO_TIMESTAMP = -1

# Bytes read per pread when walking batch headers (lookups, tail scan, batch iteration).
SCAN_CHUNK = 64 * 1024
# Bytes read per pread when iterating over whole batches.
BATCH_CHUNK = 1024 * 1024
# Bytes read per pread when CRC-checking a whole segment during recovery.
RECOVERY_CHUNK = 8 * 1024 * 1024

# Read ends remembered per segment (one or two per reader of the partition)
_READ_ENDS = 16
_RECENT_READS = 16  # a leader's partitions read in one turn by each of its followers' fetches
_RECENT_READ_BYTES = 2 * 1024 * 1024  # (replica.fetch.max.bytes is 1 MiB) so that they hold 32 MiB at most

_BATCH_LENGTH = struct.Struct(">i")
_BATCH_LENGTH_AT = 8


def file_name(base_offset: int, suffix: str) -> str:
    return f"{base_offset:020d}{suffix}"


def whole_batches_length(buf: bytes) -> int:
    """Length of the longest prefix of ``buf`` made of whole batches."""
    return whole_batches(buf)[0]


def whole_batches(buf: bytes) -> tuple[int, int]:
    """(length of the longest prefix of ``buf`` made of whole batches, where the last of them starts)."""
    end = last = 0
    while len(buf) - end >= LOG_OVERHEAD:
        size = LOG_OVERHEAD + _BATCH_LENGTH.unpack_from(buf, end + _BATCH_LENGTH_AT)[0]
        if size < HEADER_SIZE or end + size > len(buf):
            break
        last = end
        end += size
    return end, last


class Truncation(NamedTuple):
    """What recovery cut off the end of a segment."""

    file_name: str
    offset: int  # first offset that was dropped
    bytes_truncated: int
    reason: str

    def __str__(self) -> str:
        return f"truncated {self.bytes_truncated} bytes of {self.file_name} at offset {self.offset} ({self.reason})"


def _remember(recent: OrderedDict, key: tuple, value) -> None:
    """Keep ``value`` in one of the broker's small caches of segment bytes, the oldest going past _RECENT_READS."""
    recent[key] = value
    if len(recent) > _RECENT_READS:
        recent.popitem(last=False)


class LogSegment:
    """Batches from ``base_offset`` on, appended with pwrite and read with pread on one open fd.

    Opening a segment only opens its files; the owner then calls ``load`` for a
    segment that was flushed, or ``recover`` for one that may be torn.
    """

    # the last reads of any segment, and their bytes: every follower of a partition asks for the same new
    # batches in turn (an append woke them all), and a stored byte changes only by a truncation, which forgets
    # the segment's. A few for the broker, not one a segment: thousands of idle partitions keep no megabyte each.
    _recent_reads: OrderedDict[tuple, bytes | memoryview] = OrderedDict()
    # and the last appends, as written: the followers' fetches an append woke ask for exactly its bytes, which
    # need no read back from the file (only those of a small buffer: a view keeps all of its buffer alive)
    _recent_appends: OrderedDict[tuple, tuple[bytes | memoryview, int]] = OrderedDict()

    def __init__(
        self, directory: Path, base_offset: int, index_interval_bytes: int, now_ms: int, *, create: bool = False
    ) -> None:
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.log_path = directory / file_name(base_offset, LOG_SUFFIX)
        flags = os.O_RDWR | os.O_CREAT | (os.O_TRUNC if create else 0)
        self._file = FileHandle(self.log_path, flags)
        try:
            self.size = os.fstat(self._fd).st_size
            self.offset_index = OffsetIndex(
                directory / file_name(base_offset, INDEX_SUFFIX), base_offset, create=create
            )
            self.time_index = TimeIndex(
                directory / file_name(base_offset, TIME_INDEX_SUFFIX), base_offset, create=create
            )
        except OSError:
            self._file.close()
            raise
        # filled and loaded by the log, which knows the producer state the entries come from
        self.txn_index = TransactionIndex(directory / file_name(base_offset, TXN_INDEX_SUFFIX))
        if create:
            self.txn_index.delete()  # left over from an earlier segment at this offset
        self.created_ms = now_ms
        self._reset_tracking()

    def _reset_tracking(self) -> None:
        # where reads ended: {offset: position of the batch a reader asking for it next gets}, so a
        # sequential reader (a consumer, a follower) finds its batch without an index search
        self._read_ends: dict[int, int] = {}
        for recent in (LogSegment._recent_reads, LogSegment._recent_appends):
            for key in [key for key in recent if key[0] is self]:  # a truncation: those bytes may be written anew
                del recent[key]
        self.next_offset = self.base_offset  # offset after the last batch
        self.max_timestamp = NO_TIMESTAMP
        self.offset_of_max_timestamp = self.base_offset  # base offset of the batch holding it
        self._first_batch_timestamp: int | None = None
        self._bytes_since_index = 0

    def _track(self, position: int, hdr: BatchHeader) -> None:
        """Account for one stored batch: next offset, max timestamp, sparse index entries."""
        if hdr.max_timestamp > self.max_timestamp:
            self.max_timestamp = hdr.max_timestamp
            self.offset_of_max_timestamp = hdr.base_offset
        if self._bytes_since_index >= self.index_interval_bytes:
            self.offset_index.maybe_append(hdr.base_offset, position)
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
            self._bytes_since_index = 0
        self._bytes_since_index += hdr.size
        self.next_offset = hdr.next_offset
        if position == 0:
            self._first_batch_timestamp = hdr.max_timestamp

    @property
    def name(self) -> str:
        return self.log_path.name

    @property
    def _fd(self) -> int:
        """The .log file's descriptor, opened again if the handle cache closed it."""
        return self._file.fd

    # --- writing -----------------------------------------------------------

    def append(self, buf: bytes | bytearray, batches: list[tuple[int, BatchHeader]]) -> None:
        """Write ``buf`` (whole batches, offsets assigned) at the end with one pwrite.

        ``batches`` are (position in buf, header as stored). On OSError the file
        is cut back to its previous size so the segment stays consistent.
        """
        position = self.size
        try:
            written = os.pwrite(self._fd, buf, position)
            while written < len(buf):  # short writes are rare but allowed on regular files
                written += os.pwrite(self._fd, memoryview(buf)[written:], position + written)
        except OSError:
            os.ftruncate(self._fd, position)
            raise
        self.size += len(buf)
        for at, hdr in batches:
            self._track(position + at, hdr)
        if len(buf.obj if isinstance(buf, memoryview) else buf) <= _RECENT_READ_BYTES:
            _remember(LogSegment._recent_appends, (self, position), (buf, self.next_offset))

    def seal(self) -> None:
        """Record the final max timestamp and write index entries (on roll and close)."""
        if self.size:
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
        self.offset_index.write_pending()
        self.time_index.write_pending()
        self.txn_index.write_pending()

    def truncate_to(self, size: int) -> None:
        """Cut the file to ``size`` (a batch boundary) and re-derive the indexes."""
        os.ftruncate(self._fd, size)
        self.size = size
        self.rebuild_indexes()

    def flush(self) -> None:
        os.fsync(self._fd)
        self.offset_index.flush()
        self.time_index.flush()
        self.txn_index.flush()

    def close(self) -> None:
        self.seal()
        self.offset_index.close()
        self.time_index.close()
        self.txn_index.close()
        self._file.close()

    def delete(self) -> None:
        self.offset_index.delete()
        self.time_index.delete()
        self.txn_index.delete()
        self._file.close()
        self.log_path.unlink(missing_ok=True)

    def mark_deleted(self) -> list[Path]:
        """Close the segment and rename its files to ``*.deleted``; returns the new paths.

        Renaming is the atomic step: a crash after it leaves files that the
        next start removes, never a segment half gone from the log.
        """
        self.close()
        renamed = []
        for path in (self.log_path, self.offset_index.path, self.time_index.path, self.txn_index.path):
            if path.exists():
                target = path.with_name(path.name + DELETED_SUFFIX)
                path.rename(target)
                renamed.append(target)
        return renamed

    def largest_timestamp(self) -> int:
        """The time retention.ms measures from: the max record timestamp, else the file's mtime (Kafka's rule)."""
        if self.max_timestamp > 0:
            return self.max_timestamp
        return self.log_path.stat().st_mtime_ns // 1_000_000

    # --- reading -----------------------------------------------------------

    def _scan(
        self, position: int, end: int, *, whole: bool = False, chunk_size: int = SCAN_CHUNK
    ) -> Iterator[tuple[int, BatchHeader, bytes, int]]:
        """Walk the batches in [position, end): (file position, header, chunk, position in chunk).

        Reads one chunk per pread and parses every header inside it. With
        ``whole`` the chunk holds the entire batch, otherwise only its header.
        Raises CorruptRecord on a length that is impossible or runs past ``end``.
        """
        want = chunk_size
        while end - position >= HEADER_SIZE:
            chunk = os.pread(self._fd, min(want, end - position), position)
            at = 0
            want = chunk_size
            while len(chunk) - at >= HEADER_SIZE:
                hdr = read_header(chunk, at)
                if hdr.size < HEADER_SIZE:
                    raise CorruptRecord(f"batch length {hdr.batch_length} below header size")
                if position + at + hdr.size > end:
                    raise CorruptRecord("truncated batch")
                if whole and at + hdr.size > len(chunk):
                    want = max(chunk_size, hdr.size)  # re-read from this batch with room for all of it
                    break
                yield position + at, hdr, chunk, at
                at += hdr.size
            position += at

    def find_position(self, offset: int) -> tuple[int, BatchHeader] | None:
        """(position, header) of the batch holding ``offset``, or None if it is past this segment."""
        if offset >= self.next_offset:
            return None
        _, start = self.offset_index.lookup(offset)
        # the batch holding the offset starts within an index interval (and a batch) of the entry
        for position, hdr, _, _ in self._scan(start, self.size, chunk_size=self.index_interval_bytes + HEADER_SIZE):
            if hdr.next_offset > offset:
                return position, hdr
        return None

    def batch_position(self, offset: int) -> int | None:
        """Position of the batch holding ``offset`` (or of the first one after it, in a compacted gap),
        or None if it is past this segment. Where an earlier read ended, no search and no read."""
        if offset >= self.next_offset:
            return None
        position = self._read_ends.get(offset)
        if position is None:
            found = self.find_position(offset)
            position = None if found is None else found[0]
        return position

    def find_timestamp(self, timestamp: int) -> tuple[int, BatchHeader] | None:
        """(position, header) of the first batch whose max timestamp is >= ``timestamp``."""
        if self.max_timestamp < timestamp:
            return None
        _, start = self.offset_index.lookup(self.time_index.lookup(timestamp))
        for position, hdr, _, _ in self._scan(start, self.size):
            if hdr.max_timestamp >= timestamp:
                return position, hdr
        return None

    def read(self, position: int, max_bytes: int, end_position: int, min_one: bool = True) -> bytes | memoryview:
        """Whole batches from ``position``, at most ``max_bytes`` of them, never past ``end_position``.

        With ``min_one`` the first batch is returned even if it alone is larger (KIP-74)."""
        asked = (self, position, max_bytes, end_position, min_one)
        recent = LogSegment._recent_reads
        data = recent.get(asked)
        if data is None:
            data = self._appended(position, max_bytes, end_position)
        if data is None:
            data = self._read(position, max_bytes, end_position, min_one)
            if len(data) <= _RECENT_READ_BYTES:
                _remember(recent, asked, data)
        return data

    def _appended(self, position: int, max_bytes: int, end_position: int) -> bytes | memoryview | None:
        """The bytes an append just wrote at ``position``, if they are all that is asked for."""
        appended = LogSegment._recent_appends.get((self, position))
        if appended is None or position + len(appended[0]) != end_position or len(appended[0]) > max_bytes:
            return None
        self._read_ended(appended[1], end_position)
        return appended[0]

    def _read(self, position: int, max_bytes: int, end_position: int, min_one: bool) -> bytes | memoryview:
        limit = end_position - position
        if limit < HEADER_SIZE:
            return b""
        data = os.pread(self._fd, min(max(max_bytes, HEADER_SIZE), limit), position)
        first = read_header(data)
        if first.size > max_bytes and not min_one:
            return b""
        if first.size > len(data):
            data = os.pread(self._fd, min(first.size, limit), position)
            self._read_ended(first.next_offset, position + len(data))
            return data
        end, last = whole_batches(data)
        self._read_ended(next_offset_at(data, last), position + end)
        # a view, not a slice: the tail is dropped without copying a megabyte again
        return data if end == len(data) else memoryview(data)[:end]

    def _read_ended(self, next_offset: int, position: int) -> None:
        if len(self._read_ends) >= _READ_ENDS:  # more readers than that at once: start over
            self._read_ends.clear()
        self._read_ends[next_offset] = position

    def batches(self, position: int = 0) -> Iterator[tuple[BatchHeader, bytes]]:
        """Every batch from ``position`` to the current end, with its bytes."""
        for _, hdr, chunk, at in self._scan(position, self.size, whole=True, chunk_size=BATCH_CHUNK):
            yield hdr, chunk[at : at + hdr.size]

    def headers(self, position: int = 0) -> Iterator[tuple[int, BatchHeader]]:
        """(position, header) of every batch from ``position`` to the current end (the producer-state rebuild)."""
        for at, hdr, _, _ in self._scan(position, self.size):
            yield at, hdr

    def read_batch(self, position: int, hdr: BatchHeader) -> bytes:
        return os.pread(self._fd, hdr.size, position)

    def offset_at(self, position: int) -> int:
        """The base offset of the batch starting at ``position``; the next offset at the end."""
        if position >= self.size:
            return self.next_offset
        return read_header(os.pread(self._fd, HEADER_SIZE, position)).base_offset

    def time_waited_for_roll(self, now_ms: int, incoming_timestamp: int) -> int:
        """The age segment.ms is compared with, as in Kafka: from the first batch's timestamp to the
        incoming batches' largest one (so old timestamps cannot roll a segment per request), or
        from the segment's creation by the broker's clock if its first batch has no timestamp."""
        if self._first_batch_timestamp is None and self.size >= HEADER_SIZE:
            self._first_batch_timestamp = read_header(os.pread(self._fd, HEADER_SIZE, 0)).max_timestamp
        first = self._first_batch_timestamp
        return incoming_timestamp - first if first is not None and first >= 0 else now_ms - self.created_ms

    # --- opening -----------------------------------------------------------

    def load(self) -> list[str]:
        """Open a segment that was flushed: validate the indexes and find the end.

        Invalid or missing index files are rebuilt from the batch headers; the
        returned list describes each rebuild. The tail after the last index
        entry is walked to learn the next offset, which also checks that the
        last entry points at a batch boundary. Raises CorruptRecord if the
        headers themselves are damaged.
        """
        repairs = []
        for index in (self.offset_index, self.time_index):
            try:
                index.load(self.size)
            except CorruptIndex as exc:
                repairs.append(f"rebuilt {index.path.name} ({exc})")
        if repairs:
            self.rebuild_indexes()
            return repairs
        try:
            self._scan_tail()
        except (CorruptIndex, CorruptRecord) as exc:
            # The indexes passed their own checks but disagree with the log.
            self.rebuild_indexes()
            repairs.append(f"rebuilt {self.offset_index.path.name} and {self.time_index.path.name} ({exc})")
        return repairs

    def _scan_tail(self) -> None:
        self._reset_tracking()
        last_time = self.time_index.last_entry()
        if last_time is not None:
            self.max_timestamp, self.offset_of_max_timestamp = last_time
        last = self.offset_index.last_entry()
        start = 0 if last is None else last[1]
        for position, hdr, _, _ in self._scan(start, self.size):
            if position == start and last is not None and hdr.base_offset != last[0]:
                raise CorruptIndex(f"entry for offset {last[0]} points at offset {hdr.base_offset}")
            self._track(position, hdr)
        if last_time is not None and last_time[1] >= self.next_offset:
            raise CorruptIndex(f"time index entry for offset {last_time[1]} past the segment end")

    def rebuild_indexes(self) -> None:
        """Re-derive indexes and tracking from the batch headers (no CRC check)."""
        self.offset_index.reset()
        self.time_index.reset()
        self._reset_tracking()
        for position, hdr, _, _ in self._scan(0, self.size):
            self._track(position, hdr)
        self.offset_index.write_pending()
        self.time_index.write_pending()

    def recover(self) -> Truncation | None:
        """CRC-check every batch, cut the file at the first invalid or partial one and rebuild the indexes."""
        self.offset_index.reset()
        self.time_index.reset()
        self._reset_tracking()
        valid_end = 0
        reason = None
        try:
            for position, hdr, chunk, at in self._scan(0, self.size, whole=True, chunk_size=RECOVERY_CHUNK):
                check_batch(chunk, at, hdr)
                self._track(position, hdr)
                valid_end = position + hdr.size
        except CorruptRecord as exc:
            reason = str(exc)
        self.offset_index.write_pending()
        self.time_index.write_pending()
        if valid_end == self.size:
            return None
        truncation = Truncation(self.name, self.next_offset, self.size - valid_end, reason or "truncated batch")
        os.ftruncate(self._fd, valid_end)
        self.size = valid_end
        return truncation
