"""Helpers shared by the storage tests: building, appending and inspecting batches."""

from __future__ import annotations

import shutil
from pathlib import Path

from protocol.records import build_batch, check_batch, iter_records, parse_produce_records, read_header
from storage.log import Log


def make_batch(records: int = 1, timestamp_ms: int = 1_000, value_size: int = 10, tag: int = 0) -> bytes:
    """A batch of ``records`` records whose values identify it by ``tag``."""
    value = f"{tag}:".encode().ljust(value_size, b"x")
    return build_batch([(b"key", value)] * records, timestamp_ms=timestamp_ms)


def append(log: Log, *batches: bytes, now_ms: int = 10_000) -> tuple[int, int]:
    """Append the batches in one produce call, as the broker would."""
    buf = bytearray(b"".join(batches))
    return log.append(buf, parse_produce_records(buf), now_ms)


def split_batches(data: bytes) -> list:
    """Headers of the whole batches in ``data``, checking each CRC."""
    headers = []
    position = 0
    while position < len(data):
        hdr = read_header(data, position)
        check_batch(data, position, hdr)
        headers.append(hdr)
        position += hdr.size
    assert position == len(data), "read returned a partial batch"
    return headers


def values(data: bytes) -> list[bytes]:
    """Record values of every batch in ``data``."""
    result = []
    position = 0
    while position < len(data):
        hdr = read_header(data, position)
        result += [record.value for record in iter_records(data, position)]
        position += hdr.size
    return result


def crash_copy(directory: Path, destination: Path) -> Path:
    """The files of a directory as a crash would leave them: whatever was written, no close."""
    shutil.copytree(directory, destination)
    return destination
