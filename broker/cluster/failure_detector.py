"""Fencing a broker whose process is gone, in well under a second (docs/architecture.md, "Failure detection").

A crashed process leaves its host answering for it: its connections reset and
its listener refuses. When a connection to another broker fails that way (a
replica fetcher's, the inter-broker channel's, a follower's fetch connection
here), this broker confirms on its own: it reads the broker's registration
and opens a new connection to the inter-broker endpoint registered there. Only a refusal counts -- nothing
listens there, so no process of that registration can answer or acknowledge
anything -- and then it revokes the lease of that registration: the session
ends now, not etcd.session.timeout.ms later, and the controller elects past it.
A connection that opens or times out proves nothing (a hung, partitioned or
loaded broker): those cases are left to the session timeout. A broker in
cluster mode listens on its inter-broker endpoint before it registers, so a
registered broker that is starting never refuses.
"""

from __future__ import annotations

import asyncio
import logging

from storage import clock

from .metadata import BrokerInfo

log = logging.getLogger("moldau.failure_detector")

CONFIRM_TIMEOUT_S = 1.0  # a refusal comes back in a round trip; a silent host is the session timeout's case
RECHECK_S = 1.0  # a broker that did not refuse is checked again at most this often


class FailureDetector:
    def __init__(self, store) -> None:
        self.store = store
        self._checked: dict[int, float] = {}  # node id -> when its last check began
        self.stopped = False  # leaving the cluster: its own connections closing tell nothing

    def connection_failed(self, node_id: int, exc: BaseException) -> None:
        """A connection to ``node_id`` reset, closed or was refused: confirm, in the background."""
        if not isinstance(exc, (ConnectionError, EOFError)) or node_id == self.store.broker.node_id:
            return  # a timeout is no sign of a crash
        if self.stopped or node_id not in self.store.cache.brokers or self.store.client is None:
            return
        now = clock.monotonic()
        if now - self._checked.get(node_id, -RECHECK_S) < RECHECK_S:
            return
        self._checked[node_id] = now
        self.store.broker.supervisor.spawn(self._confirm(node_id))

    async def _confirm(self, node_id: int) -> None:
        try:
            found = await self.store.client.get(self.store.key("brokers", "ids", node_id))
            if found is None:
                return  # its session already ended
            info = BrokerInfo.decode(found.value)
            if not await refuses(info.host, info.port):
                return
            await self.store.client.revoke_lease(found.lease)
            log.warning("broker %d refuses connections at %s:%d: its process is gone; ended its etcd session",
                        node_id, info.host, info.port)
        except Exception as exc:  # noqa: BLE001 -- etcd away, the lease already gone: the session timeout remains
            log.info("could not confirm that broker %d is gone: %s", node_id, exc)


async def refuses(host: str, port: int) -> bool:
    """True only if a TCP connection to host:port is refused (nothing listens there)."""
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), CONFIRM_TIMEOUT_S)
    except ConnectionRefusedError:
        return True
    except (OSError, asyncio.TimeoutError):
        return False
    writer.close()
    return False
