"""LoopbackChannel: requests the broker sends to a broker that happens to be itself.

The transaction coordinator sends WriteTxnMarkers to each partition's
leader. On a single broker that leader is this broker, so the request is
encoded into a frame, decoded and handled exactly as one from a socket
would be, and the response goes through the codec the same way, so the
coordinator deals with a real response either way.
"""

from __future__ import annotations

import inspect

from protocol import codec
from protocol.frames import decode_request_header, decode_response, encode_request, response_chunks

from .broker import Broker
from .handlers import HANDLERS

CLIENT_ID = "moldau-coordinator"


class LoopbackChannel:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.correlation_id = 0

    async def send(self, node_id: int, api: str, version: int, body: dict) -> dict:
        if node_id != self.broker.node_id:
            raise ConnectionRefusedError(f"node {node_id} is not this broker, and there is no other")
        self.correlation_id += 1
        frame = memoryview(encode_request(api, version, self.correlation_id, CLIENT_ID, body))[4:]
        header = decode_request_header(frame)
        handler = HANDLERS[header.api_key]
        request, _ = codec.decode(handler.name + "Request", version, frame, header.body_offset)
        result = handler.handle(self.broker, request, header)
        if inspect.isawaitable(result):
            result = await result
        response = b"".join(response_chunks(api, version, self.correlation_id, result))
        return decode_response(api, version, memoryview(response)[4:])[1]
