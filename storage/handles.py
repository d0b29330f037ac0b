"""Open file descriptors of segment files, at most a fixed number at once (an LRU).

A partition holds three or four files per segment (.log, .index, .timeindex, .txnindex). Kept open
for good, a broker with thousands of partitions runs out of descriptors -- for new connections, and
on restart before it listens. Each file is instead a FileHandle: the descriptor is opened again on first use after
the cache closed it as least recently used. Everything on a descriptor here is positional (pread,
pwrite, O_APPEND writes, fsync), so closing and reopening loses nothing.
"""

from __future__ import annotations

import errno
import os
import threading
from collections import OrderedDict
from pathlib import Path

# Flags that only make sense on the first open: a reopen must not truncate or re-create.
_FIRST_OPEN_ONLY = os.O_CREAT | os.O_TRUNC | os.O_EXCL

DEFAULT_CAPACITY = 4096


class HandleCache:
    """The open descriptors of every FileHandle, least recently used first."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        self.capacity = capacity
        self._open: OrderedDict[FileHandle, None] = OrderedDict()
        self._lock = threading.Lock()  # the broker's loop is one thread; tools may read from others
        self.reopened = 0  # descriptors opened again after an eviction, for the tests and logs

    def __len__(self) -> int:
        return len(self._open)

    def set_capacity(self, capacity: int) -> None:
        with self._lock:
            self.capacity = max(capacity, 1)
            self._evict()

    def _used(self, handle: FileHandle) -> None:
        with self._lock:
            if handle in self._open:
                self._open.move_to_end(handle)
            else:
                self._open[handle] = None
                self._evict(keep=handle)

    def _forget(self, handle: FileHandle) -> None:
        with self._lock:
            self._open.pop(handle, None)

    def _evict(self, keep: FileHandle | None = None) -> None:
        while len(self._open) > self.capacity:
            oldest = next(iter(self._open))
            if oldest is keep:
                break
            del self._open[oldest]
            oldest.release()


HANDLES = HandleCache()


class FileHandle:
    """One file, opened when ``fd`` is asked for; hashable by identity for the cache."""

    __slots__ = ("path", "_flags", "_fd", "_cache", "_closed", "__weakref__")

    def __init__(self, path: Path, flags: int, cache: HandleCache = HANDLES) -> None:
        self.path = path
        self._cache = cache
        self._fd: int | None = os.open(path, flags, 0o644)  # now: a missing directory fails here, not later
        self._flags = flags & ~_FIRST_OPEN_ONLY
        self._closed = False
        cache._used(self)

    @property
    def fd(self) -> int:
        if self._fd is None:
            if self._closed:  # as a closed descriptor would: never reopen a file renamed or replaced since
                raise OSError(errno.EBADF, f"{self.path.name} is closed")
            self._fd = os.open(self.path, self._flags)
            self._cache.reopened += 1
        self._cache._used(self)
        return self._fd

    def release(self) -> None:
        """Close the descriptor (the cache's eviction); the next ``fd`` opens it again."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)

    def close(self) -> None:
        self._closed = True
        self._cache._forget(self)
        self.release()
