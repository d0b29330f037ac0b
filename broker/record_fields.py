"""Kafka's classic (non-flexible) field encoding, as the coordinators' internal records use it.

Keys and values of __consumer_offsets and __transaction_state records are
int16-versioned structs of fixed-width integers, int16-length strings and
int32-counted arrays.
"""

from __future__ import annotations

import struct

I8 = struct.Struct(">b")
I16 = struct.Struct(">h")
I32 = struct.Struct(">i")
I64 = struct.Struct(">q")


class RecordFormatError(ValueError):
    """A record this broker cannot read (an unknown version, or damaged)."""


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
        n = self.int32()
        if n > len(self.data) - self.pos:
            raise RecordFormatError(f"array of {n} entries overruns the record")
        return max(n, 0)
