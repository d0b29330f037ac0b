"""Sparse indexes of a log segment: offset -> file position, timestamp -> offset.

Entries live in memory (two arrays searched with bisect) and are appended to
the index file in batches by ``write_pending`` (on flush, roll, close and after
a rebuild). A file that lost its newest entries is still a correct sparse index,
and segments written after the recovery point are rebuilt on an unclean start
anyway, so the append path never pays a syscall for the index.
"""

from __future__ import annotations

import operator
import os
import struct
from array import array
from bisect import bisect_right
from pathlib import Path

from storage.errors import CorruptIndex
from storage.handles import FileHandle

# Array type codes; u32 fields take 4 bytes a value in memory as on disk.
_U32 = next(code for code in "IL" if array(code).itemsize == 4)
_I64 = "q"


# map() keeps the comparisons in C: a full segment's index has 250k+ entries.
def _strictly_increasing(values: array) -> bool:
    return all(map(operator.lt, values, values[1:]))


def _non_decreasing(values: array) -> bool:
    return all(map(operator.le, values, values[1:]))


class _SparseIndex:
    """Fixed-size (key, value) entries with keys strictly increasing."""

    ENTRY: struct.Struct  # big-endian key, value
    KEY_TYPE: str
    VALUE_TYPE: str

    def __init__(self, path: Path, base_offset: int, *, create: bool = False) -> None:
        self.path = path
        self.base_offset = base_offset
        self._existed = not create and path.exists()
        self._keys = array(self.KEY_TYPE)
        self._values = array(self.VALUE_TYPE)
        self._pending = bytearray()
        flags = os.O_RDWR | os.O_CREAT | os.O_APPEND | (os.O_TRUNC if create else 0)
        self._file = FileHandle(path, flags)

    @property
    def _fd(self) -> int:
        return self._file.fd

    def __len__(self) -> int:
        return len(self._keys)

    def load(self, log_size: int) -> None:
        """Read the file into memory; raises CorruptIndex if it is missing or inconsistent."""
        if not self._existed:
            raise CorruptIndex("missing")
        data = os.pread(self._fd, os.fstat(self._fd).st_size, 0)
        if len(data) % self.ENTRY.size:
            raise CorruptIndex(f"size {len(data)} is not a multiple of {self.ENTRY.size}")
        count = len(data) // self.ENTRY.size
        fields = struct.unpack(">" + self.ENTRY.format[1:] * count, data)
        keys, values = array(self.KEY_TYPE, fields[0::2]), array(self.VALUE_TYPE, fields[1::2])
        self._check(keys, values, log_size)
        self._keys, self._values = keys, values
        self._pending.clear()

    def _check(self, keys: array, values: array, log_size: int) -> None:
        raise NotImplementedError

    def _append(self, key: int, value: int) -> None:
        self._keys.append(key)
        self._values.append(value)
        self._pending += self.ENTRY.pack(key, value)

    def _floor(self, key: int) -> int:
        """Index of the greatest entry whose key is <= key, or -1."""
        return bisect_right(self._keys, key) - 1

    def write_pending(self) -> None:
        while self._pending:
            with memoryview(self._pending) as view:
                written = os.write(self._fd, view)
            del self._pending[:written]

    def reset(self) -> None:
        """Drop every entry, in memory and on disk."""
        self._keys = array(self.KEY_TYPE)
        self._values = array(self.VALUE_TYPE)
        self._pending.clear()
        os.ftruncate(self._fd, 0)
        self._existed = True

    def flush(self) -> None:
        self.write_pending()
        os.fsync(self._fd)

    def close(self) -> None:
        self.write_pending()
        self._file.close()

    def delete(self) -> None:
        self._file.close()
        self.path.unlink(missing_ok=True)


class OffsetIndex(_SparseIndex):
    """Relative offset (u32) -> file position (u32) of the batch starting there."""

    ENTRY = struct.Struct(">II")
    KEY_TYPE = _U32
    VALUE_TYPE = _U32

    def maybe_append(self, offset: int, position: int) -> None:
        relative = offset - self.base_offset
        if not self._keys or relative > self._keys[-1]:
            self._append(relative, position)

    def lookup(self, offset: int) -> tuple[int, int]:
        """(offset, position) of the greatest entry at or below ``offset``; the segment start if none."""
        i = self._floor(offset - self.base_offset)
        if i < 0:
            return self.base_offset, 0
        return self.base_offset + self._keys[i], self._values[i]

    def last_entry(self) -> tuple[int, int] | None:
        if not self._keys:
            return None
        return self.base_offset + self._keys[-1], self._values[-1]

    def _check(self, keys: array, values: array, log_size: int) -> None:
        if not (_strictly_increasing(keys) and _strictly_increasing(values)):
            raise CorruptIndex("entries out of order")
        if values and values[-1] >= log_size:
            raise CorruptIndex(f"position {values[-1]} beyond the log size {log_size}")


class TimeIndex(_SparseIndex):
    """Timestamp (i64) -> relative offset (u32) of the first batch that reached that max timestamp.

    Timestamps are the segment's running maximum, so an entry (t, o) promises
    that every batch before offset o has a max timestamp below t.
    """

    ENTRY = struct.Struct(">qI")
    KEY_TYPE = _I64
    VALUE_TYPE = _U32

    def maybe_append(self, timestamp: int, offset: int) -> None:
        if not self._keys or timestamp > self._keys[-1]:
            self._append(timestamp, offset - self.base_offset)

    def lookup(self, timestamp: int) -> int:
        """Offset of the greatest entry whose timestamp is <= ``timestamp``; the segment base if none."""
        i = self._floor(timestamp)
        return self.base_offset + (self._values[i] if i >= 0 else 0)

    def last_entry(self) -> tuple[int, int] | None:
        """(timestamp, offset) of the newest entry: the segment's max timestamp as of that entry."""
        if not self._keys:
            return None
        return self._keys[-1], self.base_offset + self._values[-1]

    def _check(self, keys: array, values: array, log_size: int) -> None:
        if not (_strictly_increasing(keys) and _non_decreasing(values)):
            raise CorruptIndex("entries out of order")
