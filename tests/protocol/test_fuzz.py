"""Hostile input: the decoders either succeed or raise their own error type.

Anything else (IndexError, struct.error, MemoryError, a hang) would take a
connection handler down with an exception the broker does not expect, or let
a few bytes of input reserve gigabytes.
"""

from __future__ import annotations

import struct
import time
import tracemalloc

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers.mutation import HUGE_INT32, HUGE_VARINT, OVERWRITES, mutate
from protocol import codec, frames
from schema_samples import advertised_versions, params, sample

REQUESTS = advertised_versions(kinds=("Request",))
VALID = {case: codec.encode_bytes(*case, sample(*case)) for case in REQUESTS}

MEMORY_LIMIT = 256 << 10  # bytes a single decode may allocate on top of its input

FUZZ = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def decode_or_refuse(name: str, version: int, data) -> dict | None:
    """Decode, allowing only DecodeError; a success must stay inside the buffer."""
    try:
        message, end = codec.decode(name, version, data)
    except codec.DecodeError:
        return None
    assert 0 <= end <= len(data)
    return message


def mutations():
    """(kind, position, argument) edits, positions taken modulo the input length."""
    position = st.integers(0, 1 << 16)
    return st.lists(
        st.one_of(
            st.tuples(st.just("flip"), position, st.integers(1, 255)),
            st.tuples(st.just("truncate"), position, st.none()),
            st.tuples(st.just("insert"), position, st.binary(min_size=1, max_size=8)),
            st.tuples(st.just("delete"), position, st.integers(1, 8)),
            st.tuples(st.just("overwrite"), position, st.sampled_from(OVERWRITES)),
        ),
        min_size=1,
        max_size=4,
    )


# --- every advertised request decoder --------------------------------------------


@pytest.mark.parametrize("name,version", params(REQUESTS))
@FUZZ
@given(data=st.binary(max_size=96))
def test_random_bytes(name, version, data):
    decode_or_refuse(name, version, data)


@pytest.mark.parametrize("name,version", params(REQUESTS))
@FUZZ
@given(edits=mutations())
def test_mutated_valid_request(name, version, edits):
    decode_or_refuse(name, version, mutate(VALID[name, version], edits))


@pytest.mark.parametrize("name,version", params(REQUESTS))
def test_hostile_length_at_every_offset(name, version):
    """Splice a ~2**31 / ~2**32 length over every position of a valid request: refused fast, nothing big allocated."""
    valid = VALID[name, version]
    tracemalloc.start()
    try:
        for hostile in (HUGE_INT32, HUGE_VARINT):
            for at in range(len(valid)):
                data = valid[:at] + hostile + valid[at + len(hostile) :]
                tracemalloc.reset_peak()
                before = tracemalloc.get_traced_memory()[0]
                decode_or_refuse(name, version, data)
                assert tracemalloc.get_traced_memory()[1] - before < MEMORY_LIMIT, f"{hostile.hex()} at byte {at}"
    finally:
        tracemalloc.stop()


EXCEEDS = "length exceeds the frame"
HOSTILE = {  # name: (message, version, bytes, the check that must refuse them)
    "compact array count 2**32-1": ("MetadataRequest", 12, HUGE_VARINT, EXCEEDS),
    "int32 array count 0x7fffffff": ("MetadataRequest", 1, HUGE_INT32, EXCEEDS),
    "nested int32 partition count": ("FetchRequest", 4, struct.pack(">iiiib", -1, 0, 0, 0, 0) + struct.pack(">ih", 1, 1) + b"t" + HUGE_INT32, EXCEEDS),
    "int32 records length": ("ProduceRequest", 3, struct.pack(">hhi", -1, 1, 0) + struct.pack(">ih", 1, 1) + b"t" + struct.pack(">ii", 1, 0) + HUGE_INT32, EXCEEDS),
    "compact records length": ("ProduceRequest", 9, b"\x00" + struct.pack(">hi", 1, 0) + b"\x02\x02t" + b"\x02" + struct.pack(">i", 0) + HUGE_VARINT, EXCEEDS),
    "compact string length": ("MetadataRequest", 12, b"\x02" + bytes(16) + HUGE_VARINT, EXCEEDS),
    "tag section count": ("MetadataRequest", 12, b"\x01\x00\x00" + HUGE_VARINT, "varint"),
    "tag size": ("MetadataRequest", 12, b"\x01\x00\x00\x01\x00" + HUGE_VARINT, EXCEEDS),
    "overlong varint": ("MetadataRequest", 12, b"\xff\xff\xff\xff\xff\x01", "varint"),
}


@pytest.mark.parametrize("case", HOSTILE.values(), ids=HOSTILE.keys())
def test_hostile_lengths_are_refused_quickly(case):
    name, version, data, reason = case
    tracemalloc.start()
    started = time.perf_counter()
    try:
        with pytest.raises(codec.DecodeError, match=reason):
            codec.decode(name, version, data)
        elapsed = time.perf_counter() - started
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert elapsed < 0.05 and peak < MEMORY_LIMIT


NULL_WHERE_FORBIDDEN = {  # the schema has no nullableVersions covering these
    "classic string": ("MetadataRequest", 1, struct.pack(">ih", 1, -1)),
    "compact string": ("MetadataRequest", 9, b"\x02" + b"\x00"),
    "classic array": ("CreateTopicsRequest", 2, struct.pack(">i", -1)),
    "compact array": ("CreateTopicsRequest", 5, b"\x00"),
}


@pytest.mark.parametrize("case", NULL_WHERE_FORBIDDEN.values(), ids=NULL_WHERE_FORBIDDEN.keys())
def test_null_where_the_schema_forbids_it(case):
    name, version, data = case
    with pytest.raises(codec.DecodeError, match="null"):
        codec.decode(name, version, data)


# --- headers and framing ----------------------------------------------------------


def read_requests(stream: bytes, max_size: int = 1 << 12) -> None:
    """The broker's read path, allowing only FrameError and DecodeError."""
    try:
        for frame in frames.FrameDecoder(max_size).feed(stream):
            header = frames.decode_request_header(frame)
            assert header.body_offset <= len(frame)
            name = frames.API_NAMES.get(header.api_key)
            if (f"{name}Request", header.api_version) in VALID:
                decode_or_refuse(name + "Request", header.api_version, frame[header.body_offset :])
    except frames.FrameError:
        pass


@settings(max_examples=150, deadline=None)
@given(st.binary(max_size=64))
def test_random_request_headers(frame):
    try:
        header = frames.decode_request_header(frame)
    except frames.FrameError:
        return
    assert header.body_offset <= len(frame)


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(REQUESTS), mutations())
def test_mutated_request_frames(case, edits):
    name, version = case
    stream = frames.encode_request(name[: -len("Request")], version, 42, "fuzz-client", sample(name, version))
    read_requests(mutate(stream, edits))


@settings(max_examples=150, deadline=None)
@given(st.lists(st.binary(max_size=40), max_size=5))
def test_random_chunks_into_frame_decoder(chunks):
    decoder = frames.FrameDecoder(64)
    try:
        for chunk in chunks:
            for frame in decoder.feed(chunk):
                assert len(frame) <= 64
    except frames.FrameError:
        pass
    assert decoder.pending() <= sum(map(len, chunks))
