"""A connection from this broker to another: one Kafka request at a time (callers queue), answered in order.

Responses are read straight into their own buffers (``ResponseFrames``, a buffered protocol): a follower's
megabyte of records is copied once from the socket, not into a stream's buffer and out again.
"""

from __future__ import annotations

import asyncio
from collections import deque

from protocol.frames import FrameDecoder, FrameError, decode_response, encode_request

from .client_security import ClientSecurity

_LARGEST = 2**31 - 1  # a response's size is bounded by what was asked (a fetch's max_bytes), not here


class ResponseFrames(asyncio.BufferedProtocol):
    """Size-prefixed frames off the socket, in order (FrameDecoder reads them in place); the writer's flow
    control for ``drain``."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self._decoder = FrameDecoder(_LARGEST)
        self._frames: deque = deque()
        self._waiter: asyncio.Future | None = None
        self._lost: BaseException | None = None
        self._write_paused = False
        self._drained: asyncio.Future | None = None

    def connection_made(self, transport) -> None:
        self.transport = transport

    @property
    def lost(self) -> bool:
        return self._lost is not None

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._decoder.get_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        try:
            frames = self._decoder.buffer_updated(nbytes)
        except FrameError as exc:
            self.transport.close()
            self._fail(ConnectionError(f"bad response: {exc}"))
            return
        for frame in frames:
            self._deliver(frame)

    def _deliver(self, frame) -> None:
        self._frames.append(frame)
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def _fail(self, exc: BaseException) -> None:
        self._lost = exc
        for waiter in (self._waiter, self._drained):
            if waiter is not None and not waiter.done():
                waiter.set_exception(exc)

    def connection_lost(self, exc: BaseException | None) -> None:
        if self._lost is None:  # as a stream reader says it: EOFError for a close, else what broke it
            self._fail(exc if exc is not None else EOFError("the broker closed the connection"))

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)

    async def drain(self) -> None:
        if self._lost is not None:
            raise self._lost
        if self._write_paused:
            self._drained = asyncio.get_running_loop().create_future()
            await self._drained

    async def next_frame(self):
        while not self._frames:
            if self._lost is not None:
                raise self._lost
            self._waiter = asyncio.get_running_loop().create_future()
            await self._waiter
        return self._frames.popleft()


class BrokerConnection:
    def __init__(self, client_id: str, security: ClientSecurity) -> None:
        self.client_id = client_id
        self.security = security  # TLS and SASL of inter.broker.listener.name
        self.address: tuple[str, int] | None = None
        self._frames: ResponseFrames | None = None
        self._correlation_id = 0
        self._lock = asyncio.Lock()  # one request in flight: its response is the next frame

    async def request(self, address: tuple[str, int], api: str, version: int, body: dict, timeout_s: float) -> dict:
        """Send one request and return the decoded response; raises OSError or TimeoutError (and closes)."""
        async with self._lock:
            try:
                # in this task, unlike wait_for: a cancellation that comes as the response does is not lost
                async with asyncio.timeout(timeout_s):
                    return await self._roundtrip(address, api, version, body)
            except BaseException:
                self.close()
                raise

    async def _roundtrip(self, address, api, version, body) -> dict:
        # (a connection the other broker closed while this one had nothing to ask is opened anew, not written to)
        if self._frames is None or self._frames.lost or self.address != address:
            self.close()
            self._frames = await self.security.open(*address, ResponseFrames)
            self.address = address
            await self.security.authenticate(self._exchange)
        return await self._exchange(api, version, body)

    async def _exchange(self, api: str, version: int, body: dict) -> dict:
        self._correlation_id += 1
        frames = self._frames
        frames.transport.write(encode_request(api, version, self._correlation_id, self.client_id, body))
        await frames.drain()
        frame = await frames.next_frame()
        correlation_id, response = decode_response(api, version, frame.toreadonly())
        if correlation_id != self._correlation_id:
            raise ConnectionError(f"response to request {correlation_id}, expected {self._correlation_id}")
        return response

    def close(self) -> None:
        if self._frames is not None:
            self._frames.transport.close()
        self._frames = None
