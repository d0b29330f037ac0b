"""LoopbackChannel: requests the broker sends to a broker that happens to be itself.

The transaction coordinator sends WriteTxnMarkers to each partition's
leader. When that leader is this broker (always, on a single broker), the
request is encoded into a frame, decoded and handled exactly as one from a
socket would be, and the response goes through the codec the same way, so
the coordinator deals with a real response either way. Requests to other
brokers go over the network (broker/cluster/channel.py).
"""

from __future__ import annotations

import inspect

from protocol import codec
from protocol.frames import decode_request_header, decode_response, encode_request, response_chunks

from ..broker import Broker
from ..handlers import HANDLERS


class LoopbackChannel:
    def __init__(self, broker: Broker, client_id: str) -> None:
        self.broker = broker
        self.client_id = client_id
        self.correlation_id = 0

    async def send(self, node_id: int, api: str, version: int, body: dict) -> dict:
        if node_id != self.broker.node_id:
            raise ConnectionRefusedError(f"node {node_id} is not this broker, and there is no other")
        self.correlation_id += 1
        frame = memoryview(encode_request(api, version, self.correlation_id, self.client_id, body))[4:]
        header = decode_request_header(frame)
        handler = HANDLERS[header.api_key]
        request, _ = codec.decode(handler.name + "Request", version, frame, header.body_offset)
        result = handler.handle(self.broker, request, header)
        if inspect.isawaitable(result):
            result = await result
        response = b"".join(response_chunks(api, version, self.correlation_id, result))
        return decode_response(api, version, memoryview(response)[4:])[1]
