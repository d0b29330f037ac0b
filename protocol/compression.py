"""Decompressing a batch's records section (gzip, snappy, lz4, zstd), and compressing one again.

Only the broker's record-level work needs this (ListOffsets by timestamp inside a
compressed batch, the log cleaner, and a topic whose compression.type is a codec:
its leader recompresses each batch); otherwise batches are stored as they came.
"""

from __future__ import annotations

import struct

import cramjam

from .errors import CorruptRecord

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


_M32 = 0xFFFFFFFF
_XXH_PRIME1, _XXH_PRIME2, _XXH_PRIME3, _XXH_PRIME4, _XXH_PRIME5 = (
    2654435761, 2246822519, 3266489917, 668265263, 374761393)


def _xxh32_short(data: bytes, seed: int = 0) -> int:
    """xxHash32 of fewer than 16 bytes (an LZ4 frame descriptor's checksum)."""
    assert len(data) < 16

    def rotl(x: int, r: int) -> int:
        return ((x << r) | (x >> (32 - r))) & _M32

    h = (seed + _XXH_PRIME5 + len(data)) & _M32
    i = 0
    while i + 4 <= len(data):
        h = rotl((h + int.from_bytes(data[i:i + 4], "little") * _XXH_PRIME3) & _M32, 17) * _XXH_PRIME4 & _M32
        i += 4
    for byte in data[i:]:
        h = rotl((h + byte * _XXH_PRIME5) & _M32, 11) * _XXH_PRIME1 & _M32
    h ^= h >> 15
    h = h * _XXH_PRIME2 & _M32
    h ^= h >> 13
    h = h * _XXH_PRIME3 & _M32
    return h ^ (h >> 16)


# An LZ4 frame of independent 64 KB blocks without checksums, the only kind Kafka's Java client reads
# (cramjam's frames link their blocks)
_LZ4_BLOCK = 64 * 1024
_LZ4_DESCRIPTOR = bytes([0x60, 0x40])  # version 01, independent blocks; 64 KB blocks
_LZ4_HEADER = b"\x04\x22\x4d\x18" + _LZ4_DESCRIPTOR + bytes([(_xxh32_short(_LZ4_DESCRIPTOR) >> 8) & 0xFF])
_LZ4_UNCOMPRESSED = 0x80000000


def _lz4_frame(data: bytes) -> bytes:
    out = bytearray(_LZ4_HEADER)
    for start in range(0, len(data), _LZ4_BLOCK):
        raw = data[start : start + _LZ4_BLOCK]
        block = bytes(cramjam.lz4.compress_block(raw, store_size=False))
        if len(block) >= len(raw):
            out += (len(raw) | _LZ4_UNCOMPRESSED).to_bytes(4, "little") + raw
        else:
            out += len(block).to_bytes(4, "little") + block
    return bytes(out + b"\x00\x00\x00\x00")


_COMPRESSORS = {
    GZIP: lambda d: bytes(cramjam.gzip.compress(d)),
    SNAPPY: _xerial_snappy,
    LZ4: _lz4_frame,
    ZSTD: lambda d: bytes(cramjam.zstd.compress(d)),
}
CODECS = {"uncompressed": 0, "gzip": GZIP, "snappy": SNAPPY, "lz4": LZ4, "zstd": ZSTD}  # compression.type


def compress(codec: int, data: bytes) -> bytes:
    """``data`` compressed with ``codec`` in the framing Kafka's clients read."""
    return _COMPRESSORS[codec](data)
