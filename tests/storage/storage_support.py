"""Helpers shared by the storage tests: building, appending and inspecting batches."""

from __future__ import annotations

import shutil
import struct
from pathlib import Path

from protocol.records import (
    HEADER_SIZE,
    batch_crc,
    build_batch,
    check_batch,
    iter_records,
    parse_produce_records,
    read_header,
)
from storage.log import Log


def make_batch(records: int = 1, timestamp_ms: int = 1_000, value_size: int = 10, tag: int = 0) -> bytes:
    """A batch of ``records`` records whose values identify it by ``tag``."""
    value = f"{tag}:".encode().ljust(value_size, b"x")
    return build_batch([(b"key", value)] * records, timestamp_ms=timestamp_ms)


def spread_timestamps(batch: bytes, deltas: list[int]) -> bytes:
    """``batch`` with record i at base timestamp + deltas[i] (build_batch gives every record the base).

    Works for records of fewer than 64 bytes and deltas below 64, whose varints are one byte.
    """
    data = bytearray(batch)
    position = HEADER_SIZE
    for delta in deltas:
        length = data[position] >> 1  # zigzag varint, one byte
        data[position + 2] = delta << 1  # after the length and the attributes byte
        position += 1 + length
    hdr = read_header(data)
    struct.pack_into(">q", data, 35, hdr.base_timestamp + max(deltas))  # maxTimestamp
    struct.pack_into(">I", data, 17, batch_crc(data, 0, hdr))
    return bytes(data)


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
