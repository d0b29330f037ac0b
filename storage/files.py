"""Small metadata files: atomic replacement, directory fsync, Kafka's text forms."""

from __future__ import annotations

import base64
import ctypes
import ctypes.util
import fcntl
import os
import uuid
from pathlib import Path
from typing import BinaryIO

from storage.errors import LogDirInUse

LOCK_FILE = ".lock"


def fsync_dir(directory: Path) -> None:
    """Make created, renamed or removed directory entries durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _libc_syncfs():
    try:
        return ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True).syncfs
    except (OSError, AttributeError):  # not Linux: os.sync below
        return None


_syncfs = _libc_syncfs()


def sync_filesystem(directory: Path) -> None:
    """Make everything written to ``directory``'s filesystem durable in one call (Linux's syncfs): one
    flush for many small files written unsynced, instead of an fsync each."""
    if _syncfs is None:
        os.sync()
        return
    fd = os.open(directory, os.O_RDONLY)
    try:
        if _syncfs(fd) != 0:
            error = ctypes.get_errno()
            raise OSError(error, os.strerror(error), str(directory))
    finally:
        os.close(fd)


def lock_directory(directory: Path) -> BinaryIO:
    """Kafka's log-dir lock: an exclusive flock on ``<directory>/.lock``, held while the returned file is open.

    The kernel drops it when the process dies, so a crash never leaves a stale lock behind."""
    directory.mkdir(parents=True, exist_ok=True)
    lock = open(directory / LOCK_FILE, "ab")
    try:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.close()
        raise LogDirInUse(f"{directory} is in use by another broker process (its {LOCK_FILE} is locked)") from None
    return lock


def atomic_write(path: Path, data: bytes, sync: bool = True, mode: int = 0o644) -> None:
    """Replace ``path`` so that a crash leaves either the old or the new content.

    Without ``sync`` nothing is fsynced: a crash may then also leave an empty file. ``mode`` is the
    new file's (0o600 for secrets: readable by no one else at any moment)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.unlink(missing_ok=True)  # a leftover keeps its mode: O_CREAT applies ``mode`` only to a new file
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if sync:
        fsync_dir(path.parent)


def read_key_values(path: Path, separator: str) -> dict[str, str]:
    """``key<separator>value`` lines (meta.properties, partition.metadata); # starts a comment."""
    result = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#") and separator in line:
            key, value = line.split(separator, 1)
            result[key.strip()] = value.strip()
    return result


def write_key_values(path: Path, values: dict[str, str], separator: str, sync: bool = True) -> None:
    atomic_write(path, "".join(f"{key}{separator}{value}\n" for key, value in values.items()).encode(), sync)


def encode_uuid(value: uuid.UUID) -> str:
    """Kafka's text form of a Uuid (topic ids, cluster ids): URL-safe base64, no padding."""
    return base64.urlsafe_b64encode(value.bytes).rstrip(b"=").decode()


def decode_uuid(text: str) -> uuid.UUID:
    try:
        return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
    except ValueError:
        raise ValueError(f"not a Kafka uuid: {text!r}") from None


def random_uuid() -> uuid.UUID:
    """A fresh id that, like Kafka's, is never all zeros and never renders with a leading dash."""
    while True:
        value = uuid.uuid4()
        if value.int and not encode_uuid(value).startswith("-"):
            return value
