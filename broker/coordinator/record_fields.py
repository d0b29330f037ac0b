"""Kafka's field encodings, as the coordinators' internal records use them.

Keys and values of __consumer_offsets and __transaction_state records are
int16-versioned structs of fixed-width integers, int16-length strings and
int32-counted arrays; flexible versions (only TransactionLog value 1 here)
use varint-counted ("compact") strings and arrays and end each struct with
tagged fields.
"""

from __future__ import annotations

import struct

I8 = struct.Struct(">b")
I16 = struct.Struct(">h")
I32 = struct.Struct(">i")
I64 = struct.Struct(">q")


class RecordFormatError(ValueError):
    """A record this broker cannot read (an unknown version, or damaged)."""


def encode_uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def encode_compact_string(s: str) -> bytes:
    raw = s.encode()
    return encode_uvarint(len(raw) + 1) + raw


def encode_string(s: str | None) -> bytes:
    if s is None:
        return I16.pack(-1)
    raw = s.encode()
    return I16.pack(len(raw)) + raw


class Reader:
    def __init__(self, data: bytes):
        self.data = data
        self.pos = 0

    def _fixed(self, s: struct.Struct) -> int:
        try:
            (v,) = s.unpack_from(self.data, self.pos)
        except struct.error:
            raise RecordFormatError("record ends early") from None
        self.pos += s.size
        return v

    def int8(self) -> int:
        return self._fixed(I8)

    def int16(self) -> int:
        return self._fixed(I16)

    def int32(self) -> int:
        return self._fixed(I32)

    def int64(self) -> int:
        return self._fixed(I64)

    def _take(self, n: int) -> bytes:
        if self.pos + n > len(self.data):
            raise RecordFormatError("field overruns the record")
        raw = self.data[self.pos : self.pos + n]
        self.pos += n
        return raw

    def nullable_string(self) -> str | None:
        n = self.int16()
        if n < 0:
            return None
        try:
            return self._take(n).decode()
        except UnicodeDecodeError:
            raise RecordFormatError("string is not UTF-8") from None

    def string(self) -> str:
        s = self.nullable_string()
        if s is None:
            raise RecordFormatError("null where a string is required")
        return s

    def bytes(self) -> bytes:
        n = self.int32()
        return b"" if n < 0 else self._take(n)

    def count(self) -> int:
        """An array's length; -1 (null) reads as 0, and no count may promise more than the bytes left."""
        return self._bounded(self.int32())

    def _bounded(self, n: int) -> int:
        if n > len(self.data) - self.pos:
            raise RecordFormatError(f"array of {n} entries overruns the record")
        return max(n, 0)

    # --- flexible versions ---

    def uvarint(self) -> int:
        value = shift = 0
        while True:
            byte = self.int8() & 0xFF
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                return value
            shift += 7
            if shift > 28:
                raise RecordFormatError("varint longer than 5 bytes")

    def compact_count(self) -> int:
        """A compact array's length (null reads as 0)."""
        return self._bounded(self.uvarint() - 1)

    def compact_string(self) -> str:
        n = self.uvarint() - 1
        if n < 0:
            raise RecordFormatError("null where a string is required")
        try:
            return self._take(n).decode()
        except UnicodeDecodeError:
            raise RecordFormatError("string is not UTF-8") from None

    def tagged_fields(self) -> dict[int, bytes]:
        """A struct's tagged fields: tag -> its raw value."""
        return {self.uvarint(): self._take(self.uvarint()) for _ in range(self._bounded(self.uvarint()))}
