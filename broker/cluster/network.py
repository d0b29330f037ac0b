"""A connection from this broker to another: one Kafka request at a time (callers queue), answered in order."""

from __future__ import annotations

import asyncio
import struct

from protocol.frames import decode_response, encode_request

from .client_security import ClientSecurity

_SIZE = struct.Struct(">i")


class BrokerConnection:
    def __init__(self, client_id: str, security: ClientSecurity) -> None:
        self.client_id = client_id
        self.security = security  # TLS and SASL of inter.broker.listener.name
        self.address: tuple[str, int] | None = None
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
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
        if self._writer is None or self.address != address:
            self.close()
            self._reader, self._writer = await self.security.open(*address)
            self.address = address
            await self.security.authenticate(self._exchange)
        return await self._exchange(api, version, body)

    async def _exchange(self, api: str, version: int, body: dict) -> dict:
        self._correlation_id += 1
        self._writer.write(encode_request(api, version, self._correlation_id, self.client_id, body))
        await self._writer.drain()
        (size,) = _SIZE.unpack(await self._reader.readexactly(4))
        frame = await self._reader.readexactly(size)
        correlation_id, response = decode_response(api, version, memoryview(frame))
        if correlation_id != self._correlation_id:
            raise ConnectionError(f"response to request {correlation_id}, expected {self._correlation_id}")
        return response

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None
