"""InterBrokerChannel: requests this broker sends to any broker of the cluster, by node id.

The transaction coordinator's WriteTxnMarkers go to each partition's
leader. To this broker they go through the LoopbackChannel; to another,
over one BrokerConnection per destination, to the address the metadata
cache has for it (the advertised address of inter.broker.listener.name, as
replica fetchers use). A failed or timed-out request closes its connection,
and the next one reconnects -- to a new address too, if the broker
registered another. The connection speaks that listener's security protocol
(client_security.py).
"""

from __future__ import annotations

from broker.network.loopback import LoopbackChannel

from .network import BrokerConnection


class InterBrokerChannel:
    def __init__(self, broker, client_id: str) -> None:
        self.broker = broker
        self.client_id = client_id
        self.loopback = LoopbackChannel(broker, client_id)
        self.connections: dict[int, BrokerConnection] = {}

    async def send(self, node_id: int, api: str, version: int, body: dict) -> dict:
        """The decoded response; raises OSError (or TimeoutError) when the broker cannot be reached."""
        if node_id == self.broker.node_id:
            return await self.loopback.send(node_id, api, version, body)
        destination = self.broker.store.cache.brokers.get(node_id)
        if destination is None:
            raise ConnectionRefusedError(f"broker {node_id} is not a live broker")
        connection = self.connections.get(node_id)
        if connection is None:
            connection = self.connections[node_id] = BrokerConnection(self.client_id,
                                                                      self.broker.store.client_security)
        try:
            return await connection.request((destination.host, destination.port), api, version, body,
                                            self.broker.config["request.timeout.ms"] / 1000)
        except (OSError, EOFError) as exc:
            self.broker.store.peer_connection_failed(node_id, exc)
            raise
