"""TransactionIndex: the aborted transactions whose abort marker lies in one segment.

The file ``<base>.txnindex`` holds Kafka's AbortedTxn entries, 34 bytes each,
big-endian: version (int16, 0), producer id, first offset, last offset (the
offset of the abort marker) and the last stable offset right after the abort.
Entries are appended as markers are written, so they are sorted by last
offset, and a read_committed fetch finds the ones overlapping what it returns
by bisection. The file is created with its first entry: most segments never
get one. All entries are also kept in memory, and readers use those: an
entry the file could not take (a full disk) stays pending, and the next
append, roll (seal), flush or close writes it -- a roll or flush that
cannot fails, so no producer-state snapshot or recovery point passes an
abort whose entry is not on disk.
"""

from __future__ import annotations

import os
import struct
from bisect import bisect_left
from pathlib import Path
from typing import NamedTuple

from storage.errors import CorruptIndex
from storage.handles import FileHandle

TXN_INDEX_SUFFIX = ".txnindex"
ABORTED_TXN_VERSION = 0

_ENTRY = struct.Struct(">hqqqq")


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


def _last_offset(entry: AbortedTxn) -> int:
    return entry.last_offset


class TransactionIndex:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.entries: list[AbortedTxn] = []
        self._file: FileHandle | None = None  # opened at the first write (most segments have no entry)
        self._pending = bytearray()  # the end of the entries, not yet in the file
        self._dirty = False

    def load(self) -> None:
        """Read the file, if there is one; raises CorruptIndex if it is not a sorted list of entries."""
        if not self.path.exists():
            self.entries = []
            return
        data = self.path.read_bytes()
        if len(data) % _ENTRY.size:
            raise CorruptIndex(f"{self.path.name}: {len(data)} bytes is not a whole number of entries")
        entries: list[AbortedTxn] = []
        for version, producer_id, first, last, lso in _ENTRY.iter_unpack(data):
            if version != ABORTED_TXN_VERSION:
                raise CorruptIndex(f"{self.path.name}: entry version {version}")
            if first > last or (entries and last < entries[-1].last_offset):
                raise CorruptIndex(f"{self.path.name}: entries out of order at offset {last}")
            entries.append(AbortedTxn(producer_id, first, last, lso))
        self.entries = entries

    def append(self, entry: AbortedTxn) -> None:
        """Index an aborted transaction whose marker is stored. Readers see it at once; an
        OSError means the file could not take it yet (it stays pending) and propagates."""
        self.entries.append(entry)
        self._pending += _ENTRY.pack(ABORTED_TXN_VERSION, *entry)
        self.write_pending()

    def write_pending(self) -> None:
        if not self._pending:
            return
        if self._file is None:
            self._file = FileHandle(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        while self._pending:  # a short write leaves the rest pending, so the file never holds half an entry for long
            with memoryview(self._pending) as view:
                written = os.write(self._file.fd, view)
            del self._pending[:written]
            self._dirty = True

    def truncate_from(self, offset: int) -> None:
        """Drop the entries whose marker is at or after ``offset``."""
        keep = bisect_left(self.entries, offset, key=_last_offset)
        if keep == len(self.entries):
            return
        on_disk = len(self.entries) * _ENTRY.size - len(self._pending)
        del self.entries[keep:]
        if not self.entries:
            self.delete()
            return
        kept = keep * _ENTRY.size
        if kept <= on_disk:
            os.truncate(self.path, kept)
            self._pending.clear()
        else:
            del self._pending[kept - on_disk :]

    def collect(self, start: int, end: int, into: list[AbortedTxn]) -> bool:
        """Add the entries overlapping offsets [start, end) to ``into``.

        True when no later entry, here or in a later segment, can overlap:
        a transaction aborted later that began before ``end`` would have
        held this entry's last stable offset below ``end``.
        """
        for entry in self.entries[bisect_left(self.entries, start, key=_last_offset) :]:
            if entry.first_offset < end:
                into.append(entry)
            if entry.last_stable_offset >= end:
                return True
        return False

    def flush(self) -> None:
        self.write_pending()
        if self._dirty and self._file is not None:
            os.fsync(self._file.fd)
        self._dirty = False

    def close(self) -> None:
        self.write_pending()
        if self._file is not None:
            self._file.close()
            self._file = None

    def delete(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        self.path.unlink(missing_ok=True)
        self.entries = []
        self._pending.clear()
        self._dirty = False
