"""How many connections the broker takes, from whom and how fast (Kafka's ConnectionQuotas).

- ``max.connections``: all listeners together, further capped by the descriptors the open-file limit
  leaves for connections (broker/network/descriptors.py), so accepting never fails with EMFILE; at the limit
  the acceptors wait (server.py), as Kafka's do. With more than one listener, the inter-broker
  listener (inter.broker.listener.name) is protected as in Kafka: its connections are accepted at the
  limit, and the least recently active connection of another listener is closed to make room, so
  clients cannot lock replication out;
- ``max.connections.per.ip`` and ``max.connections.per.ip.overrides`` (``host:count,...``);
- ``max.connection.creation.rate`` (KIP-612): new connections a second; past it a new connection
  waits (is not read) until the rate allows it, as Kafka's acceptor waits;
- the ``connection_creation_rate`` client quota of an ip entity (AlterClientQuotas, KIP-612): a
  connection from an address over it is closed.

A connection over the per-address limits is closed as soon as it is accepted (Kafka's
TooManyConnectionsException): the client sees the broker hang up before its first answer and
reconnects after its backoff. Refusals are logged at most once a second, with their count, so a
flood cannot flood the log.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter, deque

from storage import clock

from ..config.broker_config import ConfigError

log = logging.getLogger("moldau.connections")

UNLIMITED = 2**31 - 1  # Kafka's default for these: Int.MaxValue
RATE_WINDOW_S = 1.0


def parse_overrides(text: str) -> dict[str, int]:
    """``max.connections.per.ip.overrides``: ``host:count`` pairs, comma-separated."""
    overrides = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        host, sep, count = item.rpartition(":")
        if not sep or not host or not count.strip().isdigit():
            raise ConfigError(f"max.connections.per.ip.overrides: {item!r} is not host:count")
        overrides[host.strip().strip("[]")] = int(count)
    return overrides


class ConnectionQuotas:
    def __init__(self, config, descriptors_for_connections: int | None = None, client_quotas=None,
                 protected_listener: str | None = None) -> None:
        self.client_quotas = client_quotas
        self.protected_listener = protected_listener
        self._descriptors = descriptors_for_connections
        self.by_ip: Counter[str] = Counter()
        self.total = 0
        self._created: deque[float] = deque()  # creation times in the last RATE_WINDOW_S
        self._refused = 0
        self._refusal_logged = 0.0
        self.setting_up = 0  # accepted, not yet counted: a TLS handshake, a transport being made
        self._slot_freed = asyncio.Event()
        self._full_logged = 0.0
        self.configure(config)

    def configure(self, config) -> None:
        """The limits from ``config``: at the start, and when dynamic broker configs change them."""
        self.max_connections = config["max.connections"]
        if self._descriptors is not None and self._descriptors < self.max_connections:
            self.max_connections = self._descriptors
        self.per_ip = config["max.connections.per.ip"]
        self.overrides = parse_overrides(config["max.connections.per.ip.overrides"])
        self.rate = config["max.connection.creation.rate"]
        self._slot_freed.set()  # acceptors waiting at the old limit look again

    async def wait_for_slot(self, listener: str) -> None:
        """Return once the broker has fewer than max.connections connections (those being set up count),
        at once on the protected listener."""
        while listener != self.protected_listener and self.total + self.setting_up >= self.max_connections:
            now = clock.monotonic()
            if now - self._full_logged >= 1.0:
                log.warning("%d connections open, the limit is %d: new connections wait to be accepted",
                            self.total + self.setting_up, self.max_connections)
                self._full_logged = now
            self._slot_freed.clear()
            await self._slot_freed.wait()

    def admit(self, ip: str, listener: str) -> bool:
        """Count a new connection from ``ip`` in, or refuse it (False) past a count limit."""
        limit = self.overrides.get(ip, self.per_ip)
        if self.by_ip[ip] >= limit:
            self._refuse(f"{ip} has {self.by_ip[ip]} connections, max.connections.per.ip is {limit}")
            return False
        if self.total >= self.max_connections and listener != self.protected_listener:
            self._refuse(f"{self.total} connections open, the limit is {self.max_connections}")
            return False
        if self.client_quotas is not None and self.client_quotas.record_connection(ip):
            self._refuse(f"{ip} is over its connection_creation_rate quota")
            return False
        self.by_ip[ip] += 1
        self.total += 1
        return True

    @property
    def over_limit(self) -> bool:
        return self.total > self.max_connections

    def set_up_done(self) -> None:
        """An accepted connection is set up (counted by admit) or failed to be."""
        self.setting_up -= 1
        self._slot_freed.set()

    def release(self, ip: str) -> None:
        self.total -= 1
        self._slot_freed.set()
        self.by_ip[ip] -= 1
        if self.by_ip[ip] <= 0:
            del self.by_ip[ip]

    def creation_delay(self, now: float | None = None) -> float:
        """Seconds a connection created now must wait for max.connection.creation.rate (0: none)."""
        if self.rate >= UNLIMITED:
            return 0.0
        now = clock.monotonic() if now is None else now
        while self._created and self._created[0] <= now - RATE_WINDOW_S:
            self._created.popleft()
        # the n-th connection of a window starts once n - rate earlier ones have left it
        start = now
        if len(self._created) >= self.rate:
            start = self._created[-self.rate] + RATE_WINDOW_S
        self._created.append(start)
        return start - now

    def _refuse(self, reason: str) -> None:
        self._refused += 1
        now = clock.monotonic()
        if now - self._refusal_logged >= 1.0:
            log.warning("refused %d connection(s): %s", self._refused, reason)
            self._refused = 0
            self._refusal_logged = now
