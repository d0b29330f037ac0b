"""Record batch v2: our builder and header checks, and batches from kafka-python."""

from __future__ import annotations

import struct

import pytest
from crc32c import crc32c
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from protocol import records
from protocol.errors import CorruptRecord

TS = 1_700_000_000_000
RECORDS_COUNT_AT = 57  # offset of recordsCount in the 61-byte header
MAGIC_AT = 16


def batch(n: int = 3, **kwargs) -> bytes:
    kwargs.setdefault("timestamp_ms", TS)
    return records.build_batch([(f"k{i}".encode(), f"v{i}".encode()) for i in range(n)], **kwargs)


def patched(data: bytes, at: int, fmt: str, value, *, reseal: bool = False) -> bytearray:
    """``data`` with one header field overwritten; ``reseal`` recomputes the CRC afterwards."""
    out = bytearray(data)
    struct.pack_into(fmt, out, at, value)
    if reseal:
        struct.pack_into(">I", out, 17, crc32c(out[21:]))
    return out


# --- header parsing and validation ---------------------------------------------


def test_build_batch_header_fields():
    data = batch(3, base_offset=100, producer_id=7, producer_epoch=2, base_sequence=40, leader_epoch=5, transactional=True)
    hdr = records.read_header(data)
    assert hdr.size == len(data)
    assert (hdr.base_offset, hdr.leader_epoch, hdr.magic) == (100, 5, 2)
    assert (hdr.records_count, hdr.last_offset_delta, hdr.last_offset, hdr.next_offset) == (3, 2, 102, 103)
    assert (hdr.base_timestamp, hdr.max_timestamp) == (TS, TS)
    assert (hdr.producer_id, hdr.producer_epoch, hdr.base_sequence, hdr.last_sequence) == (7, 2, 40, 42)
    assert hdr.is_transactional and not hdr.is_control and hdr.compression == 0
    assert hdr.crc == crc32c(data[21:])


def test_scan_and_parse_several_batches():
    data = batch(1) + batch(4, base_offset=1) + batch(2, base_offset=5)
    scanned = list(records.scan_batches(data))
    assert [(pos, hdr.records_count) for pos, hdr in scanned] == [(0, 1), (len(batch(1)), 4), (len(batch(1) + batch(4)), 2)]
    assert records.valid_prefix(data) == (scanned, len(data), None)
    assert records.parse_produce_records(data) == scanned
    assert records.parse_produce_records(memoryview(data)) == scanned


def test_scan_respects_start_and_end():
    first, second = batch(1), batch(2)
    data = b"junk" + first + second + b"trailing"
    assert [pos for pos, _ in records.scan_batches(data, 4, 4 + len(first) + len(second))] == [4, 4 + len(first)]


def test_crc_mismatch_is_corrupt():
    data = bytearray(batch())
    data[-1] ^= 0x01  # last byte of the last record's value
    with pytest.raises(CorruptRecord, match="CRC"):
        list(records.scan_batches(data))
    assert records.valid_prefix(data)[1:] == (0, "CRC32C mismatch")
    with pytest.raises(CorruptRecord):
        records.parse_produce_records(data)


def test_corruption_in_a_later_batch_keeps_the_valid_prefix():
    good = batch(2)
    bad = bytearray(batch(1, base_offset=2))
    bad[30] ^= 0xFF
    batches, end, reason = records.valid_prefix(good + bad)
    assert ([p for p, _ in batches], end, reason) == ([0], len(good), "CRC32C mismatch")


@pytest.mark.parametrize("cut", [1, 10, 30, 62])
def test_truncated_batch(cut):
    data = batch(3)
    short = data[:-cut]
    assert list(records.scan_batches(short)) == []  # a partial batch at the end is not an error...
    assert records.valid_prefix(short) == ([], 0, "truncated batch")
    with pytest.raises(CorruptRecord):  # ...but a produce request must carry whole batches
        records.parse_produce_records(short)


def test_truncated_second_batch():
    first = batch(1)
    batches, end, reason = records.valid_prefix(first + batch(2)[:-5])
    assert (len(batches), end, reason) == (1, len(first), "truncated batch")


def test_header_shorter_than_61_bytes():
    with pytest.raises(CorruptRecord, match="truncated"):
        records.read_header(batch()[:60])


def test_empty_produce_records():
    with pytest.raises(CorruptRecord, match="no record batch"):
        records.parse_produce_records(b"")


@pytest.mark.parametrize("magic", [0, 1, 3, -1])
def test_bad_magic(magic):
    data = patched(batch(), MAGIC_AT, ">b", magic)  # magic is outside the CRC
    with pytest.raises(CorruptRecord, match="magic"):
        list(records.scan_batches(data))


@pytest.mark.parametrize("length", [0, 48, -1, -(1 << 31)])
def test_batch_length_below_header(length):
    data = patched(batch(), 8, ">i", length)
    with pytest.raises(CorruptRecord, match="below header size"):
        list(records.scan_batches(data))
    with pytest.raises(CorruptRecord):
        records.parse_produce_records(data)


def test_negative_record_count():
    data = patched(batch(), RECORDS_COUNT_AT, ">i", -1, reseal=True)
    with pytest.raises(CorruptRecord, match="negative"):
        records.parse_produce_records(data)


@pytest.mark.parametrize("count", [2, 4, 0])
def test_record_count_disagrees_with_last_offset_delta(count):
    data = patched(batch(3), RECORDS_COUNT_AT, ">i", count, reseal=True)
    assert len(list(records.scan_batches(data))) == 1  # structurally fine and CRC-valid
    with pytest.raises(CorruptRecord, match="record count"):
        records.parse_produce_records(data)


# --- rewriting headers in place --------------------------------------------------


def test_set_base_offset_keeps_the_crc_valid():
    data = bytearray(batch(3))
    records.set_base_offset(data, 0, 1 << 40)
    ((_, hdr),) = records.parse_produce_records(data)
    assert (hdr.base_offset, hdr.last_offset) == (1 << 40, (1 << 40) + 2)
    assert [r.offset for r in records.iter_records(data)] == [(1 << 40) + i for i in range(3)]


def test_set_base_offset_in_the_middle_of_a_buffer():
    first, second = batch(1), batch(2)
    data = bytearray(first + second)
    records.set_base_offset(data, len(first), 9)
    assert [hdr.base_offset for _, hdr in records.parse_produce_records(data)] == [0, 9]


def test_set_log_append_time_reseals_the_crc():
    first, second = batch(1), batch(2)
    data = bytearray(first + second)
    pos, hdr = list(records.scan_batches(data))[1]
    records.set_log_append_time(data, pos, hdr, TS + 5000)
    (_, first_hdr), (_, stamped) = records.parse_produce_records(data)  # both CRCs valid
    assert first_hdr == records.read_header(first)
    assert stamped.attributes & records.TIMESTAMP_TYPE_BIT
    assert (stamped.max_timestamp, stamped.base_timestamp) == (TS + 5000, TS)
    assert stamped.crc != hdr.crc

    theirs = DefaultRecordBatch(data[pos:])
    assert theirs.validate_crc() and theirs.timestamp_type == 1
    assert [r.timestamp for r in theirs] == [TS + 5000, TS + 5000]


# --- control batches and sequences ------------------------------------------------


@pytest.mark.parametrize("marker", [records.CONTROL_ABORT, records.CONTROL_COMMIT])
def test_control_batch(marker):
    data = records.control_batch(marker, producer_id=99, producer_epoch=4, coordinator_epoch=12, timestamp_ms=TS)
    ((_, hdr),) = records.parse_produce_records(data)
    assert hdr.is_control and hdr.is_transactional
    assert (hdr.producer_id, hdr.producer_epoch, hdr.base_sequence, hdr.records_count) == (99, 4, -1, 1)
    (rec,) = records.iter_records(data)
    assert struct.unpack(">hh", rec.key) == (0, marker)
    assert struct.unpack(">hi", rec.value) == (0, 12)

    theirs = DefaultRecordBatch(data)
    assert theirs.validate_crc() and theirs.is_control_batch
    (control,) = list(theirs)
    assert (control.version, control.commit, control.abort) == (0, marker == 1, marker == 0)


@pytest.mark.parametrize(
    "base_sequence,count,expected",
    [(0, 1, 0), (10, 5, 14), (2**31 - 1, 1, 2**31 - 1), (2**31 - 1, 2, 0), (2**31 - 2, 3, 0), (2**31 - 3, 10, 6), (-1, 4, -1)],
)
def test_last_sequence_wraps_at_int32_max(base_sequence, count, expected):
    data = batch(count, producer_id=1, producer_epoch=0, base_sequence=base_sequence)
    assert records.read_header(data).last_sequence == expected
    assert DefaultRecordBatch(data).last_sequence == expected  # kafka-python's own arithmetic


# --- records inside a batch --------------------------------------------------------


def test_iter_records_roundtrip():
    entries = [
        (b"key", b"value", []),
        (None, b"null key", [("trace", b"\x00\x01"), ("empty", b"")]),
        (b"null value", None, [("null", None)]),
        (None, None, []),
        (b"", b"", [("ünïcode", b"x" * 300)]),
    ]
    data = records.build_batch(entries, base_offset=50, timestamp_ms=TS)
    got = list(records.iter_records(data))
    assert [(r.key, r.value, r.headers) for r in got] == [tuple(e) for e in entries]
    assert [r.offset for r in got] == list(range(50, 55))
    assert {r.timestamp for r in got} == {TS}

    theirs = list(DefaultRecordBatch(data))
    assert [(r.key, r.value, list(r.headers)) for r in theirs] == [tuple(e) for e in entries]


def test_iter_records_at_an_offset():
    first, second = batch(1), batch(2, base_offset=1)
    assert [r.key for r in records.iter_records(first + second, len(first))] == [b"k0", b"k1"]


@pytest.mark.parametrize("name", ["gzip", "lz4", "snappy", "zstd"])
def test_iter_records_decodes_compressed_batches(name):
    data = kafka_python_batch(CODECS[name])
    decoded = list(records.iter_records(data))
    assert [(r.offset, r.timestamp, r.key) for r in decoded] == [(i, TS + i, f"key-{i}".encode()) for i in range(20)]
    assert decoded[7].value == b"compressible payload " * 20 + b"7"
    assert decoded[7].headers == [("h", b"v")]


def test_iter_records_refuses_undecodable_compressed_data():
    data = bytearray(kafka_python_batch(CODECS["zstd"]))
    data[records.HEADER_SIZE + 4 : records.HEADER_SIZE + 12] = b"\xff" * 8
    with pytest.raises(CorruptRecord, match="decompress"):
        list(records.iter_records(data))


def test_varints_roundtrip():
    values = [0, 1, -1, 63, -64, 64, -65, 2**31 - 1, -(2**31), 2**63 - 1, -(2**63)]
    buf = bytearray()
    for v in values:
        records.write_varint(buf, v)
    pos, got = 0, []
    for _ in values:
        v, pos = records.read_varint(buf, pos)
        got.append(v)
    assert (got, pos) == (values, len(buf))
    with pytest.raises(CorruptRecord):
        records.read_varint(b"\x80\x80", 0)


# --- batches written by kafka-python's producer code --------------------------------

CODECS = {
    "none": DefaultRecordBatchBuilder.CODEC_NONE,
    "gzip": DefaultRecordBatchBuilder.CODEC_GZIP,
    "snappy": DefaultRecordBatchBuilder.CODEC_SNAPPY,
    "lz4": DefaultRecordBatchBuilder.CODEC_LZ4,
    "zstd": DefaultRecordBatchBuilder.CODEC_ZSTD,
}


def kafka_python_batch(compression: int, *, transactional: bool = False) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=compression, is_transactional=transactional,
        producer_id=1234 if transactional else -1, producer_epoch=1 if transactional else -1,
        base_sequence=10 if transactional else -1, batch_size=1 << 20,
    )
    for i in range(20):
        value = b"compressible payload " * 20 + str(i).encode()
        builder.append(offset=i, timestamp=TS + i, key=f"key-{i}".encode(), value=value, headers=[("h", b"v")])
    return bytes(builder.build())


@pytest.mark.parametrize("name", list(CODECS))
@pytest.mark.parametrize("transactional", [False, True])
def test_kafka_python_batches_pass_our_checks(name, transactional):
    data = kafka_python_batch(CODECS[name], transactional=transactional)
    ((pos, hdr),) = records.parse_produce_records(data)
    assert (pos, hdr.size, hdr.compression) == (0, len(data), CODECS[name])
    assert (hdr.records_count, hdr.last_offset_delta) == (20, 19)
    assert (hdr.base_timestamp, hdr.max_timestamp) == (TS, TS + 19)
    assert hdr.is_transactional == transactional
    if transactional:
        assert (hdr.producer_id, hdr.producer_epoch, hdr.base_sequence, hdr.last_sequence) == (1234, 1, 10, 29)
    if name != "none":
        assert hdr.size < 20 * 400, "expected kafka-python to keep the compressed form"
    else:
        assert [r.key for r in records.iter_records(data)] == [f"key-{i}".encode() for i in range(20)]


def test_kafka_python_batch_offsets_can_be_assigned():
    data = bytearray(kafka_python_batch(CODECS["lz4"]))
    records.set_base_offset(data, 0, 500)
    theirs = DefaultRecordBatch(data)
    assert theirs.validate_crc()
    assert [r.offset for r in theirs] == list(range(500, 520))


def test_corrupted_kafka_python_batch_is_rejected():
    data = bytearray(kafka_python_batch(CODECS["gzip"]))
    data[len(data) // 2] ^= 0x10
    with pytest.raises(CorruptRecord, match="CRC"):
        records.parse_produce_records(data)


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4])
def test_recompressed_keeps_every_field_but_the_codec(codec):
    """compression.type's recompression: the records and every header field survive a codec change,
    and kafka-python reads the result (CRC, framing)."""
    source = records.build_batch([(b"k%d" % i, b"value %d" % i * 50) for i in range(20)], timestamp_ms=TS,
                                 producer_id=7, producer_epoch=2, base_sequence=40, transactional=True)
    source = records.recompressed(records.recompressed(source, 1), codec)  # via gzip
    hdr, original = records.read_header(source), records.read_header(records.build_batch([(b"", b"")]))
    assert hdr.compression == codec and original.compression == 0
    assert (hdr.producer_id, hdr.producer_epoch, hdr.base_sequence, hdr.is_transactional, hdr.records_count) == (
        7, 2, 40, True, 20)
    assert [(r.key, r.value) for r in records.iter_records(source)] == [
        (b"k%d" % i, b"value %d" % i * 50) for i in range(20)]
    parsed = DefaultRecordBatch(bytearray(source))
    assert parsed.validate_crc() and [r.key for r in parsed] == [b"k%d" % i for i in range(20)]


def test_lz4_frames_have_independent_blocks_and_a_valid_descriptor():
    """The Java client reads only LZ4 frames of independent blocks; lz4's reader checks the descriptor."""
    import os

    import lz4.frame

    from protocol.compression import LZ4, compress

    data = os.urandom(50_000) + b"x" * 100_000
    frame = compress(LZ4, data)
    assert frame[4] & 0x20  # FLG: block independence
    assert lz4.frame.decompress(frame) == data
