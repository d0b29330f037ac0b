"""Size-prefixed framing, request headers v1/v2, response headers v0/v1."""

from __future__ import annotations

import struct
import tracemalloc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol import codec, frames
from schema_samples import sample, sample_records

MAX = 1 << 16


def framed(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


PAYLOADS = [b"first frame", b"", b"\x00" * 300, b"last"]
STREAM = b"".join(map(framed, PAYLOADS))


def feed_all(decoder: frames.FrameDecoder, chunks) -> list[bytes]:
    return [bytes(frame) for chunk in chunks for frame in decoder.feed(chunk)]


# --- FrameDecoder ---------------------------------------------------------------


def test_several_frames_in_one_chunk():
    decoder = frames.FrameDecoder(MAX)
    got = decoder.feed(STREAM)
    assert all(isinstance(f, memoryview) for f in got)
    assert [bytes(f) for f in got] == PAYLOADS
    assert decoder.pending() == 0


def test_stream_split_at_every_byte():
    for cut in range(len(STREAM) + 1):
        decoder = frames.FrameDecoder(MAX)
        assert feed_all(decoder, [STREAM[:cut], STREAM[cut:]]) == PAYLOADS, f"split at byte {cut}"
        assert decoder.pending() == 0, f"split at byte {cut}"


def test_one_byte_at_a_time():
    decoder = frames.FrameDecoder(MAX)
    assert feed_all(decoder, [STREAM[i : i + 1] for i in range(len(STREAM))]) == PAYLOADS


def test_a_frame_larger_than_the_scratch_area_is_read_into_its_own_buffer():
    """A produce request's megabyte goes from the socket into the frame the handler gets, not through a
    stream buffer: once its size is read, the transport is handed the frame's own bytes to fill."""
    decoder = frames.FrameDecoder(1 << 24)
    payload = bytes(range(256)) * 1024
    stream = memoryview(framed(payload) + framed(b"next"))
    scratch = decoder.get_buffer()
    scratch[:100] = stream[:100]
    assert decoder.buffer_updated(100) == []
    into = decoder.get_buffer()
    assert into.obj is not scratch.obj and len(into) == len(payload) - 96, "the rest of the frame, in its buffer"
    got, at = [], 100
    while at < len(stream):  # the transport's reads, 60,000 bytes at most each
        buffer = decoder.get_buffer()
        n = min(len(buffer), len(stream) - at, 60_000)
        buffer[:n] = stream[at : at + n]
        at += n
        got += decoder.buffer_updated(n)
    assert [bytes(f) for f in got] == [payload, b"next"]
    assert got[0].obj is into.obj
    assert decoder.pending() == 0


@pytest.mark.parametrize("chunk", [1, 4093, 65536, 200_000])
def test_frames_around_the_scratch_area_size_in_any_chunks(chunk):
    size = frames.FrameDecoder.SCRATCH
    payloads = [bytes([n % 251]) * n for n in (size - 5, size - 4, size - 3, size, 3, size * 2 + 1, 0, 17)]
    stream = b"".join(map(framed, payloads))
    decoder = frames.FrameDecoder(1 << 24)
    chunks = [stream[i : i + chunk] for i in range(0, len(stream), chunk)]
    assert feed_all(decoder, chunks) == payloads
    assert decoder.pending() == 0


def test_a_frame_announced_huge_holds_memory_for_the_bytes_that_came():
    """Like a client that announces a 100 MiB frame and sends 256 KiB of it: the broker holds about what it
    got, not what was announced; the frame, once whole, is its bytes in order."""
    decoder = frames.FrameDecoder(1 << 30)
    tracemalloc.start()
    try:
        decoder.feed(struct.pack(">i", 100 * 1024 * 1024) + bytes(256 * 1024))
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert held < 2 * 1024 * 1024, f"{held} bytes held for 256 KiB received"
    payload = bytes(range(256)) * (5 * 4096 + 3)  # over 5 MiB: read in parts, joined at the end
    stream = framed(payload) + framed(b"after")
    decoder = frames.FrameDecoder(1 << 30)
    assert feed_all(decoder, [stream[i : i + 300_000] for i in range(0, len(stream), 300_000)]) == [payload, b"after"]
    assert decoder.pending() == 0


def test_a_frame_past_the_limit_is_refused_on_its_size():
    decoder = frames.FrameDecoder(1000)
    with pytest.raises(frames.FrameError):
        decoder.feed(struct.pack(">i", 1001))


@settings(max_examples=50, deadline=None)
@given(st.lists(st.binary(max_size=40), max_size=6), st.data())
def test_any_chunking_gives_the_same_frames(payloads, data):
    stream = b"".join(map(framed, payloads))
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=10)))
    chunks = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=False)]
    decoder = frames.FrameDecoder(MAX)
    assert feed_all(decoder, chunks) == payloads
    assert decoder.pending() == 0


def test_frames_stay_valid_after_more_data_arrives():
    """Frames are views into the decoder's buffer; feeding on must not move them."""
    decoder = frames.FrameDecoder(MAX)
    first = decoder.feed(STREAM[:-3])
    snapshot = [bytes(f) for f in first]
    decoder.feed(STREAM[-3:] + framed(b"x" * 5000))
    assert [bytes(f) for f in first] == snapshot == PAYLOADS[:3]


def test_incomplete_frame_is_pending():
    decoder = frames.FrameDecoder(MAX)
    assert decoder.feed(framed(b"abcdef")[:7]) == []
    assert decoder.pending() == 7


def test_frame_of_exactly_max_size_is_accepted():
    assert feed_all(frames.FrameDecoder(100), [framed(b"y" * 100)]) == [b"y" * 100]


@pytest.mark.parametrize("size", [101, 1 << 30, 0x7FFFFFFF, -1, -(1 << 31)])
def test_bad_size_is_refused_as_soon_as_it_is_known(size):
    decoder = frames.FrameDecoder(100)
    with pytest.raises(frames.FrameError):
        decoder.feed(struct.pack(">i", size))  # no payload needed to refuse


def test_bad_size_after_good_frames():
    with pytest.raises(frames.FrameError):
        frames.FrameDecoder(100).feed(framed(b"ok") + struct.pack(">i", -5))


# --- request headers --------------------------------------------------------------


def test_request_header_v1_for_non_flexible_versions():
    body = sample("MetadataRequest", 8)
    (frame,) = frames.FrameDecoder(MAX).feed(frames.encode_request("Metadata", 8, 1234, "client-ü", body))
    header = frames.decode_request_header(frame)
    assert (header.api_key, header.api_version, header.correlation_id, header.client_id) == (3, 8, 1234, "client-ü")
    assert header.body_offset == 8 + 2 + len("client-ü".encode())  # no tag section in v1
    assert bytes(frame[header.body_offset :]) == codec.encode_bytes("MetadataRequest", 8, body)


@pytest.mark.parametrize("api,version", [("Metadata", 9), ("ApiVersions", 3), ("Fetch", 12), ("Produce", 9)])
def test_request_header_v2_for_flexible_versions(api, version):
    frame = frames.encode_request(api, version, 7, "cid", sample(api + "Request", version))[4:]
    header = frames.decode_request_header(frame)
    assert header.body_offset == 8 + 2 + 3 + 1  # the client id stays a classic string, then empty tags
    assert frame[header.body_offset - 1] == 0


def test_request_header_v2_skips_tagged_fields():
    fixed = struct.pack(">hhih", 3, 12, 99, 2) + b"me"
    tags = b"\x02" + b"\x00\x03abc" + b"\x07\x00"  # two header tags we do not read
    body = codec.encode_bytes("MetadataRequest", 12, sample("MetadataRequest", 12))
    header = frames.decode_request_header(fixed + tags + body)
    assert (header.client_id, header.body_offset) == ("me", len(fixed) + len(tags))


def test_null_client_id():
    frame = frames.encode_request("ApiVersions", 0, 1, None, {})[4:]
    header = frames.decode_request_header(frame)
    assert (header.client_id, header.body_offset) == (None, 10)


def test_unknown_api_key_reads_as_header_v1():
    header = frames.decode_request_header(struct.pack(">hhih", 9999, 1, 5, 0) + b"\x01\x02")
    assert (header.api_key, header.client_id, header.body_offset) == (9999, "", 10)


@pytest.mark.parametrize(
    "frame",
    [
        b"",
        struct.pack(">hhi", 3, 1, 1),  # no client id length
        struct.pack(">hhih", 3, 1, 1, 5) + b"abc",  # client id overruns the frame
        struct.pack(">hhih", 3, 12, 1, 0),  # flexible: tag section missing
        struct.pack(">hhih", 3, 12, 1, 0) + b"\x01\x00\x05ab",  # tag overruns the frame
    ],
)
def test_malformed_request_headers(frame):
    with pytest.raises(frames.FrameError):
        frames.decode_request_header(frame)


# --- responses ----------------------------------------------------------------------


def response_frame(api: str, version: int, body: dict) -> tuple[list, bytes]:
    chunks = frames.response_chunks(api, version, 0x01020304, body)
    data = b"".join(chunks)
    assert struct.unpack_from(">i", data)[0] == len(data) - 4
    assert data[4:8] == bytes.fromhex("01020304")
    return chunks, data


@pytest.mark.parametrize(
    "api,version,header_tags",
    [("ApiVersions", 0, False), ("ApiVersions", 3, False), ("ApiVersions", 4, False), ("Metadata", 8, False), ("Metadata", 9, True), ("Fetch", 12, True), ("DescribeCluster", 0, True)],
)
def test_response_header_version(api, version, header_tags):
    """Header v1 (a tag section) for flexible responses, except ApiVersions: always v0."""
    body = sample(api + "Response", version)
    _, data = response_frame(api, version, body)
    encoded_body = codec.encode_bytes(api + "Response", version, body)
    assert data[8:] == (b"\x00" if header_tags else b"") + encoded_body
    assert frames.decode_response(api, version, data[4:]) == (0x01020304, codec.decode(api + "Response", version, encoded_body)[0])


def fetch_response(records_field) -> dict:
    body = sample("FetchResponse", 13)
    body["responses"][0]["partitions"][0]["records"] = records_field
    return body


def test_large_records_stay_a_separate_chunk():
    big = bytearray(sample_records() * 200)
    chunks, data = response_frame("Fetch", 13, fetch_response(big))
    assert len(chunks) == 3
    assert chunks[1] is big  # handed to the transport without a copy
    _, body = frames.decode_response("Fetch", 13, data[4:])
    assert bytes(body["responses"][0]["partitions"][0]["records"]) == big


@pytest.mark.parametrize("size,chunks_expected", [(4095, 1), (4096, 3)])
def test_zero_copy_threshold(size, chunks_expected):
    chunks, _ = response_frame("Fetch", 13, fetch_response(memoryview(bytes(size))))
    assert len(chunks) == chunks_expected


def test_every_partition_with_large_records_gets_its_own_chunk():
    body = sample("FetchResponse", 13)
    segments = [bytes([i]) * 5000 for i in range(4)]
    for partition, segment in zip((p for t in body["responses"] for p in t["partitions"]), segments, strict=False):
        partition["records"] = segment
    chunks, data = response_frame("Fetch", 13, body)
    assert [c for c in chunks if len(c) == 5000] == segments
    assert len(data) == sum(map(len, chunks))
