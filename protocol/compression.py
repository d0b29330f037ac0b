"""Decompressing a batch's records section (gzip, snappy, lz4, zstd).

Only the broker's rare record-level reads need this (ListOffsets by timestamp
inside a compressed batch); produced batches are stored as they came.
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
