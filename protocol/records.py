"""Record batch v2 (magic 2): header parsing, validation, offset assignment.

The produce and fetch paths never look inside a batch: they read the 61-byte
header, check the CRC32C and rewrite the base offset in place. Record-level
encoding is only used for the broker's own small internal batches (control
markers, __consumer_offsets, __transaction_state) and by test clients.
"""

from __future__ import annotations

import struct
import time
from typing import Iterator, NamedTuple

from crc32c import crc32c

from .errors import CorruptRecord

# baseOffset, batchLength, partitionLeaderEpoch, magic, crc, attributes,
# lastOffsetDelta, baseTimestamp, maxTimestamp, producerId, producerEpoch,
# baseSequence, recordsCount
_HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = _HEADER.size  # 61
_NEXT_OFFSET = struct.Struct(">q15xi")  # the header's base offset and last offset delta
LOG_OVERHEAD = 12  # baseOffset + batchLength precede the length-counted part
_LEADER_EPOCH = struct.Struct(">i")
_CRC_START = 21  # the CRC covers attributes to the end of the batch
_MAX_TS_AT = 35
_ATTR_AT = 21
_CRC_AT = 17
_I64 = struct.Struct(">q")
_U32 = struct.Struct(">I")
_I16 = struct.Struct(">h")

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_BIT = 0x08  # 1 = LogAppendTime
TRANSACTIONAL_BIT = 0x10
CONTROL_BIT = 0x20

NO_PRODUCER_ID = -1
NO_SEQUENCE = -1

CONTROL_ABORT = 0
CONTROL_COMMIT = 1


class BatchHeader(NamedTuple):
    base_offset: int
    batch_length: int
    leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size(self) -> int:
        return LOG_OVERHEAD + self.batch_length

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def last_sequence(self) -> int:
        if self.base_sequence < 0:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) % 0x80000000

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_BIT)


def read_header(buf, pos: int = 0) -> BatchHeader:
    """Parse the header at ``pos``; raises CorruptRecord if it is short."""
    if len(buf) - pos < HEADER_SIZE:
        raise CorruptRecord("truncated batch header")
    return BatchHeader._make(_HEADER.unpack_from(buf, pos))


def next_offset_at(buf, pos: int = 0) -> int:
    """The header's next offset (base offset + last offset delta + 1) alone, for a reader that needs no more."""
    base_offset, last_offset_delta = _NEXT_OFFSET.unpack_from(buf, pos)
    return base_offset + last_offset_delta + 1


def batch_crc(buf, pos: int, hdr: BatchHeader) -> int:
    return crc32c(memoryview(buf)[pos + _CRC_START : pos + hdr.size])


def check_batch(buf, pos: int, hdr: BatchHeader) -> None:
    """Structural and CRC checks of one batch that is known to be complete."""
    if hdr.magic != 2:
        raise CorruptRecord(f"unsupported magic {hdr.magic}")
    if hdr.batch_length < HEADER_SIZE - LOG_OVERHEAD:
        raise CorruptRecord(f"batch length {hdr.batch_length} below header size")
    if hdr.records_count < 0 or hdr.last_offset_delta < 0:
        raise CorruptRecord("negative record count or offset delta")
    if batch_crc(buf, pos, hdr) != hdr.crc:
        raise CorruptRecord("CRC32C mismatch")


def scan_batches(buf, pos: int = 0, end: int | None = None) -> Iterator[tuple[int, BatchHeader]]:
    """Yield (position, header) for each complete, valid batch.

    Stops silently at a partial batch at the very end; raises CorruptRecord on
    the first invalid one. Callers that need to know where valid data ends use
    ``valid_prefix``.
    """
    end = len(buf) if end is None else end
    while end - pos >= HEADER_SIZE:
        hdr = read_header(buf, pos)
        if hdr.batch_length < HEADER_SIZE - LOG_OVERHEAD:
            raise CorruptRecord(f"batch length {hdr.batch_length} below header size")
        if pos + hdr.size > end:
            return
        check_batch(buf, pos, hdr)
        yield pos, hdr
        pos += hdr.size


def valid_prefix(buf, pos: int = 0, end: int | None = None) -> tuple[list[tuple[int, BatchHeader]], int, str | None]:
    """Scan as far as the data is valid: (batches, end of valid bytes, reason it stopped early)."""
    end = len(buf) if end is None else end
    batches: list[tuple[int, BatchHeader]] = []
    valid_end = pos
    try:
        for p, hdr in scan_batches(buf, pos, end):
            batches.append((p, hdr))
            valid_end = p + hdr.size
    except CorruptRecord as exc:
        return batches, valid_end, str(exc)
    if valid_end != end:
        return batches, valid_end, "truncated batch"
    return batches, valid_end, None


def parse_produce_records(buf) -> list[tuple[int, BatchHeader]]:
    """Validate a Produce request's records field: one or more whole v2 batches."""
    batches, valid_end, reason = valid_prefix(buf)
    if reason is not None:
        raise CorruptRecord(reason)
    if not batches:
        raise CorruptRecord("no record batch")
    for _, hdr in batches:
        if not hdr.compression and hdr.records_count != hdr.last_offset_delta + 1:
            raise CorruptRecord("record count does not match last offset delta")
    return batches


def set_base_offset(buf: bytearray, pos: int, offset: int) -> None:
    _I64.pack_into(buf, pos, offset)


def set_leader_epoch(buf: bytearray, pos: int, epoch: int) -> None:
    """Stamp partitionLeaderEpoch (outside the CRC, like the base offset)."""
    _LEADER_EPOCH.pack_into(buf, pos + LOG_OVERHEAD, epoch)


def set_log_append_time(buf: bytearray, pos: int, hdr: BatchHeader, timestamp_ms: int) -> None:
    """Stamp a batch with the broker's time (LogAppendTime topics); re-seals the CRC."""
    _I16.pack_into(buf, pos + _ATTR_AT, hdr.attributes | TIMESTAMP_TYPE_BIT)
    _I64.pack_into(buf, pos + _MAX_TS_AT, timestamp_ms)
    _U32.pack_into(buf, pos + _CRC_AT, crc32c(memoryview(buf)[pos + _CRC_START : pos + hdr.size]))


# --- record-level encoding, for the broker's own internal batches ----------


def _zigzag(n: int) -> int:
    return (n << 1) ^ (n >> 63)


def write_varint(out: bytearray, n: int) -> None:
    v = _zigzag(n) & 0xFFFFFFFFFFFFFFFF
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


def read_varint(buf, pos: int) -> tuple[int, int]:
    shift = 0
    v = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise CorruptRecord("bad varint")
        b = buf[pos]
        pos += 1
        v |= (b & 0x7F) << shift
        if not b & 0x80:
            break
        shift += 7
    return (v >> 1) ^ -(v & 1), pos


def _write_bytes(out: bytearray, data: bytes | None) -> None:
    if data is None:
        write_varint(out, -1)
    else:
        write_varint(out, len(data))
        out += data


class Record(NamedTuple):
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]


def build_batch(
    records: list[tuple[bytes | None, bytes | None]] | list[tuple[bytes | None, bytes | None, list]],
    *,
    base_offset: int = 0,
    timestamp_ms: int | None = None,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = -1,
    base_sequence: int = NO_SEQUENCE,
    transactional: bool = False,
    control: bool = False,
    leader_epoch: int = 0,
) -> bytes:
    """Encode an uncompressed v2 batch of (key, value[, headers]) records."""
    ts = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
    body = bytearray()
    for delta, rec in enumerate(records):
        key, value = rec[0], rec[1]
        headers = rec[2] if len(rec) > 2 else []
        r = bytearray(b"\x00")  # record attributes
        write_varint(r, 0)  # timestamp delta
        write_varint(r, delta)
        _write_bytes(r, key)
        _write_bytes(r, value)
        write_varint(r, len(headers))
        for hk, hv in headers:
            _write_bytes(r, hk.encode())
            _write_bytes(r, hv)
        write_varint(body, len(r))
        body += r
    attributes = (TRANSACTIONAL_BIT if transactional else 0) | (CONTROL_BIT if control else 0)
    count = len(records)
    tail = struct.pack(
        ">hiqqqhii", attributes, count - 1, ts, ts, producer_id, producer_epoch, base_sequence, count
    ) + bytes(body)
    crc = crc32c(tail)
    head = struct.pack(">qiibI", base_offset, len(tail) + 9, leader_epoch, 2, crc)
    return head + tail


def control_batch(
    marker: int, producer_id: int, producer_epoch: int, coordinator_epoch: int, timestamp_ms: int | None = None
) -> bytes:
    """A transaction marker: key = (version 0, type), value = (version 0, coordinator epoch)."""
    key = struct.pack(">hh", 0, marker)
    value = struct.pack(">hi", 0, coordinator_epoch)
    return build_batch(
        [(key, value)],
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        transactional=True,
        control=True,
        timestamp_ms=timestamp_ms,
    )


class ControlMarker(NamedTuple):
    type: int  # CONTROL_ABORT or CONTROL_COMMIT
    coordinator_epoch: int


def read_control_marker(batch, pos: int = 0) -> ControlMarker:
    """The marker a control batch holds, from its record's key and value."""
    record = next(iter_records(batch, pos), None)
    if record is None or record.key is None or len(record.key) < 4:
        raise CorruptRecord("control batch without a marker key")
    marker_type = _I16.unpack_from(record.key, 2)[0]
    value = record.value or b""
    coordinator_epoch = struct.unpack_from(">i", value, 2)[0] if len(value) >= 6 else -1
    return ControlMarker(marker_type, coordinator_epoch)


def iter_records(batch, pos: int = 0) -> Iterator[Record]:
    """Decode the records of one batch (internal topics, timestamp lookups, tests)."""
    hdr = read_header(batch, pos)
    for record, _, _ in _records_with_spans(hdr, _body(batch, pos, hdr)):
        yield record


def _body(batch, pos: int, hdr: BatchHeader):
    """The records of a batch as one (uncompressed) buffer."""
    body = memoryview(batch)[pos + HEADER_SIZE : pos + hdr.size]
    if hdr.compression:
        from .compression import (
            decompress,  # imports records; only record-level reads need it
        )

        body = decompress(hdr.compression, body)
    return body


def filter_batch(batch: bytes, keep, keep_empty: bool = False) -> bytes | None:
    """The batch with only the records ``keep(record)`` accepts (the log cleaner).

    All kept: the same bytes. Some dropped: a batch of the kept records'
    bytes, compressed as before, with the same base offset, last offset delta,
    timestamps and producer fields, so no offset or sequence changes. All
    dropped: None, or with ``keep_empty`` a batch without records (a
    producer's last batch, which its state is rebuilt from).
    """
    hdr = read_header(batch)
    body = _body(batch, 0, hdr)
    kept = [body[start:end] for record, start, end in _records_with_spans(hdr, body) if keep(record)]
    if len(kept) == hdr.records_count:
        return batch
    if not kept and not keep_empty:
        return None
    return _with_records(batch, hdr, b"".join(kept), len(kept), hdr.compression if kept else 0)


def recompressed(batch, codec: int) -> bytes:
    """One batch with its records compressed with ``codec`` (0: none) instead, every other field as it was
    (Kafka's LogValidator for a topic whose compression.type is not the producer's)."""
    hdr = read_header(batch)
    if hdr.compression == codec:
        return batch
    return _with_records(batch, hdr, bytes(_body(batch, 0, hdr)), hdr.records_count, codec)


def _with_records(batch, hdr: BatchHeader, records: bytes, count: int, codec: int) -> bytes:
    """``batch``'s header over ``count`` encoded ``records``, compressed with ``codec``; CRC and length anew."""
    tail = bytearray(batch[_CRC_START:HEADER_SIZE])
    struct.pack_into(">h", tail, 0, (hdr.attributes & ~COMPRESSION_MASK) | codec)
    struct.pack_into(">i", tail, len(tail) - 4, count)
    if codec:
        from .compression import compress

        records = compress(codec, records)
    tail += records
    head = struct.pack(">qiibI", hdr.base_offset, len(tail) + 9, hdr.leader_epoch, hdr.magic, crc32c(tail))
    return head + bytes(tail)


def _records_with_spans(hdr: BatchHeader, body) -> Iterator[tuple[Record, int, int]]:
    """Each record with where its bytes (length prefix included) start and end in ``body``."""
    p = 0
    end = len(body)
    for _ in range(hdr.records_count):
        start = p
        length, p = read_varint(body, p)
        rec_end = p + length
        if rec_end > end or length < 0:
            raise CorruptRecord("record overruns its batch")
        p += 1  # attributes
        ts_delta, p = read_varint(body, p)
        off_delta, p = read_varint(body, p)
        key, p = _read_bytes(body, p)
        value, p = _read_bytes(body, p)
        n_headers, p = read_varint(body, p)
        headers = []
        for _ in range(n_headers):
            hk, p = _read_bytes(body, p)
            hv, p = _read_bytes(body, p)
            headers.append(((hk or b"").decode(), hv))
        yield Record(hdr.base_offset + off_delta, hdr.base_timestamp + ts_delta, key, value, headers), start, rec_end
        p = rec_end


def _read_bytes(buf, pos: int) -> tuple[bytes | None, int]:
    n, pos = read_varint(buf, pos)
    if n < 0:
        return None, pos
    if pos + n > len(buf):
        raise CorruptRecord("field overruns its record")
    return bytes(buf[pos : pos + n]), pos + n
