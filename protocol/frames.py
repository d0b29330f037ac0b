"""Size-prefixed frames and request/response headers (sans-io)."""

from __future__ import annotations

import struct

from . import codec

_SIZE = struct.Struct(">i")
_HEADER_FIXED = struct.Struct(">hhih")  # api key, api version, correlation id, client id length
_CORRELATION = struct.Struct(">i")
_RESPONSE_HEADER_V0 = struct.Struct(">ii")  # frame size, correlation id

# api key -> API name ("Produce", "Fetch", ...), from the message definitions
API_NAMES: dict[int, str] = {
    d["apiKey"]: name[: -len("Request")]
    for name, d in ((n, codec.definition(n)) for n in codec._DEFS)
    if d.get("type") == "request"
}
API_KEYS: dict[str, int] = {v: k for k, v in API_NAMES.items()}


class FrameError(ValueError):
    """A frame that cannot be served; the connection must be closed."""


class FrameDecoder:
    """Splits a byte stream into request frames, read in place (asyncio's buffered protocol).

    The transport reads into ``get_buffer()``: a scratch area for frame sizes and small frames, or -- once a
    size says the frame is larger than that -- the frame's own buffer, so a produce request's megabyte is
    copied from the socket once, not into a stream buffer and out again. Memory follows the bytes that
    came more than the sizes announced: the scratch area is made at the first read, and a frame over
    ``WHOLE`` is read in ``PART``-sized pieces made as its bytes arrive and joined at its end (a client
    that announces 100 MiB and sends a little holds a little). Complete frames are memoryviews over private
    bytearrays, so the produce path can rewrite batch offsets in place.
    """

    __slots__ = ("max_size", "_scratch", "_filled", "_parts", "_size", "_got", "_part_got")

    SCRATCH = 16 * 1024
    WHOLE = 2 * 1024 * 1024  # a frame up to this size gets its buffer at once (a produce request, a fetch's MiB)
    PART = 1024 * 1024

    def __init__(self, max_size: int):
        self.max_size = max_size
        self._scratch: bytearray | None = None
        self._filled = 0  # bytes of the scratch area in use
        self._parts: list[bytearray] = []  # a frame larger than the scratch area, being read into
        self._size = 0  # its size
        self._got = 0  # its bytes so far
        self._part_got = 0  # of them, in its last part

    def get_buffer(self) -> memoryview:
        if self._parts:
            return memoryview(self._parts[-1])[self._part_got :]
        if self._scratch is None:
            self._scratch = bytearray(self.SCRATCH)
        return memoryview(self._scratch)[self._filled :]

    def buffer_updated(self, nbytes: int) -> list[memoryview]:
        """``nbytes`` more were read into the last buffer; the frames that completed."""
        if not self._parts:
            self._filled += nbytes
            return self._split()
        self._got += nbytes
        self._part_got += nbytes
        if self._got == self._size:
            parts, self._parts = self._parts, []
            return [memoryview(parts[0] if len(parts) == 1 else bytearray().join(parts))]
        if self._part_got == len(self._parts[-1]):
            self._parts.append(bytearray(min(self.PART, self._size - self._got)))
            self._part_got = 0
        return []

    def feed(self, data) -> list[memoryview]:
        """The frames ``data`` completes, for a caller that has the bytes already."""
        frames = []
        data = memoryview(data)
        while data:
            buffer = self.get_buffer()
            n = min(len(buffer), len(data))
            buffer[:n] = data[:n]
            data = data[n:]
            frames += self.buffer_updated(n)
        return frames

    def _split(self) -> list[memoryview]:
        scratch, filled = self._scratch, self._filled
        frames = []
        pos = 0
        while filled - pos >= 4:
            (size,) = _SIZE.unpack_from(scratch, pos)
            if size < 0 or size > self.max_size:
                raise FrameError(f"frame size {size} outside 0..{self.max_size}")
            start = pos + 4
            have = filled - start
            if have >= size:
                frames.append(memoryview(scratch[start : start + size]))  # (a slice is a copy of its own)
                pos = start + size
                continue
            if size > self.SCRATCH - 4:  # the rest is read into the frame's own buffer
                first = bytearray(size if size <= self.WHOLE else self.PART)  # (``have`` fits: PART > SCRATCH)
                first[:have] = scratch[start:filled]
                self._parts, self._size, self._got, self._part_got = [first], size, have, have
                pos = filled
            break
        rest = filled - pos
        if pos and rest:
            scratch[:rest] = scratch[pos:filled]
        self._filled = rest
        return frames

    def pending(self) -> int:
        """Bytes buffered towards an incomplete frame."""
        return self._filled + (4 + self._got if self._parts else 0)


class RequestHeader:
    __slots__ = ("api_key", "api_version", "correlation_id", "client_id", "body_offset", "client_host", "session", "read_at")

    def __init__(self, api_key, api_version, correlation_id, client_id, body_offset):
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id
        self.client_id = client_id
        self.body_offset = body_offset
        self.client_host = ""  # the peer's address as Kafka shows it ("/127.0.0.1"), set by the server
        self.session = None  # the connection's listener and principal, set by the server; None: the broker itself
        self.read_at: float | None = None  # when the server read it (time.monotonic()), kept for stage timestamps


def request_is_flexible(api_key: int, api_version: int) -> bool:
    name = API_NAMES.get(api_key)
    return name is not None and codec.is_flexible(name + "Request", api_version)


def decode_request_header(frame) -> RequestHeader:
    """Header v1 (v2 adds a tagged-field section for flexible requests)."""
    if len(frame) < _HEADER_FIXED.size:
        raise FrameError("frame shorter than a request header")
    api_key, api_version, correlation_id, n = _HEADER_FIXED.unpack_from(frame, 0)
    pos = _HEADER_FIXED.size
    client_id = None
    if n >= 0:
        if pos + n > len(frame):
            raise FrameError("client id overruns the frame")
        client_id = str(frame[pos : pos + n], "utf-8", "replace")
        pos += n
    if request_is_flexible(api_key, api_version):
        try:
            pos = codec.skip_tagged_fields(frame, pos, len(frame))
        except codec.DecodeError as exc:
            raise FrameError(str(exc)) from None
    return RequestHeader(api_key, api_version, correlation_id, client_id, pos)


def encode_request(api_name: str, version: int, correlation_id: int, client_id: str | None, body: dict) -> bytes:
    """A whole request frame (used by test clients and the wire-level tools)."""
    api_key = API_KEYS[api_name]
    w = codec.Writer()
    cid = None if client_id is None else client_id.encode()
    w.buf += _HEADER_FIXED.pack(api_key, version, correlation_id, -1 if cid is None else len(cid))
    if cid:
        w.buf += cid
    if request_is_flexible(api_key, version):
        w.buf.append(0)
    codec.encode(api_name + "Request", version, body, w)
    data = w.getvalue()
    return _SIZE.pack(len(data)) + data


class Encoded(dict):
    """A response body encoded once, to be sent many times (Metadata of thousands of partitions). As a dict
    it holds only throttle_time_ms (when ``throttled``: the body's first field, encoded as 0), which the
    sender may raise; ``data`` is the encoded body."""

    def __init__(self, data: bytes, throttled: bool) -> None:
        super().__init__({"throttle_time_ms": 0} if throttled else {})
        self.data = data


def encode_body(api_name: str, version: int, body: dict, throttled: bool) -> Encoded:
    """``body`` encoded once (its throttle_time_ms, the first field if ``throttled``, must be 0)."""
    return Encoded(codec.encode_bytes(api_name + "Response", version, body), throttled)


def response_chunks(api_name: str, version: int, correlation_id: int, body: dict) -> list:
    """A response frame as a list of buffers (large record sets stay uncopied)."""
    w = codec.Writer()
    w.buf += _RESPONSE_HEADER_V0.pack(0, correlation_id)
    # ApiVersions responses keep header v0 so any client can read them
    if api_name != "ApiVersions" and codec.is_flexible(api_name + "Response", version):
        w.buf.append(0)
    if isinstance(body, Encoded):
        start = len(w.buf)
        w.buf += body.data
        if body:
            _SIZE.pack_into(w.buf, start, body["throttle_time_ms"])
    else:
        codec.encode(api_name + "Response", version, body, w)
    chunks = w.chunks()
    _SIZE.pack_into(chunks[0], 0, sum(map(len, chunks)) - 4)
    return chunks


def decode_response(api_name: str, version: int, frame) -> tuple[int, dict]:
    """(correlation id, body) of a response frame without its size prefix."""
    (correlation_id,) = _CORRELATION.unpack_from(frame, 0)
    pos = 4
    if api_name != "ApiVersions" and codec.is_flexible(api_name + "Response", version):
        pos = codec.skip_tagged_fields(frame, pos, len(frame))
    body, _ = codec.decode(api_name + "Response", version, frame, pos)
    return correlation_id, body
