"""Byte-level mutations of valid requests, shared by the decoder fuzz tests (hypothesis)
and the wire fuzzer that sends them to a running broker (a seeded random.Random)."""

from __future__ import annotations

import random
import struct

HUGE_VARINT = b"\xff\xff\xff\xff\x0f"  # 2**32 - 1: a compact length/count of ~4 billion
HUGE_INT32 = struct.pack(">i", 0x7FFFFFFF)
# values that lengths, counts and varints go wrong with
OVERWRITES = [HUGE_VARINT, HUGE_INT32, b"\xff", b"\x00", b"\x80\x80\x80\x80\x80\x01"]
KINDS = ("flip", "truncate", "insert", "delete", "overwrite")


def mutate(data: bytes, edits) -> bytes:
    """Apply (kind, position, argument) edits in order; positions are taken modulo the length."""
    buf = bytearray(data)
    for kind, position, arg in edits:
        at = position % (len(buf) + 1)
        if kind == "flip" and at < len(buf):
            buf[at] ^= arg
        elif kind == "truncate":
            del buf[at:]
        elif kind == "insert":
            buf[at:at] = arg
        elif kind == "delete":
            del buf[at : at + arg]
        elif kind == "overwrite":
            buf[at : at + len(arg)] = arg
    return bytes(buf)


def random_edits(rng: random.Random, max_edits: int = 4) -> list:
    """1 to ``max_edits`` edits of the kinds ``mutate`` knows, drawn from ``rng``."""
    arguments = {
        "flip": lambda: rng.randint(1, 255),
        "truncate": lambda: None,
        "insert": lambda: rng.randbytes(rng.randint(1, 8)),
        "delete": lambda: rng.randint(1, 8),
        "overwrite": lambda: rng.choice(OVERWRITES),
    }
    kinds = rng.choices(KINDS, k=rng.randint(1, max_edits))
    return [(kind, rng.randrange(1 << 16), arguments[kind]()) for kind in kinds]
