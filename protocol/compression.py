"""Decompressing a batch's records section (gzip, snappy, lz4, zstd), and compressing one again.

Only the broker's rare record-level reads need this (ListOffsets by timestamp
inside a compressed batch, the log cleaner); produced batches are stored as they came.
"""

from __future__ import annotations

import struct

import cramjam

from .records import CorruptRecord

GZIP, SNAPPY, LZ4, ZSTD = 1, 2, 3, 4

# Java clients (and librdkafka, for them) frame snappy the way snappy-java's
# stream does: this magic, two version ints, then length-prefixed raw blocks
_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = len(_XERIAL_MAGIC) + 8
_BLOCK_LEN = struct.Struct(">i")


def _snappy(data: bytes) -> bytes:
    if not data.startswith(_XERIAL_MAGIC):
        return bytes(cramjam.snappy.decompress_raw(data))
    out = bytearray()
    pos = _XERIAL_HEADER
    while pos < len(data):
        (n,) = _BLOCK_LEN.unpack_from(data, pos)
        pos += 4
        if n < 0 or pos + n > len(data):
            raise CorruptRecord("snappy block overruns the batch")
        out += cramjam.snappy.decompress_raw(data[pos : pos + n])
        pos += n
    return bytes(out)


_CODECS = {
    GZIP: lambda d: bytes(cramjam.gzip.decompress(d)),
    SNAPPY: _snappy,
    LZ4: lambda d: bytes(cramjam.lz4.decompress(d)),
    ZSTD: lambda d: bytes(cramjam.zstd.decompress(d)),
}


def decompress(codec: int, data) -> bytes:
    """The uncompressed records of a batch whose attributes name ``codec``."""
    try:
        return _CODECS[codec](bytes(data))
    except KeyError:
        raise CorruptRecord(f"unknown compression codec {codec}") from None
    except (cramjam.DecompressionError, struct.error, ValueError) as exc:
        raise CorruptRecord(f"cannot decompress records: {exc}") from None


_XERIAL_BLOCK = 32 * 1024  # snappy-java's default block size


def _xerial_snappy(data: bytes) -> bytes:
    out = bytearray(_XERIAL_MAGIC + struct.pack(">ii", 1, 1))
    for start in range(0, len(data), _XERIAL_BLOCK):
        block = bytes(cramjam.snappy.compress_raw(data[start : start + _XERIAL_BLOCK]))
        out += _BLOCK_LEN.pack(len(block)) + block
    return bytes(out)


# LZ4 is missing: cramjam writes frames of dependent blocks, which the Java client refuses
_COMPRESSORS = {
    GZIP: lambda d: bytes(cramjam.gzip.compress(d)),
    SNAPPY: _xerial_snappy,
    ZSTD: lambda d: bytes(cramjam.zstd.compress(d)),
}


def compress(codec: int, data: bytes) -> bytes | None:
    """``data`` compressed with ``codec`` in the framing Kafka's clients read (the log cleaner's
    re-encoded batches); None for a codec written uncompressed instead."""
    compressor = _COMPRESSORS.get(codec)
    return None if compressor is None else compressor(data)
