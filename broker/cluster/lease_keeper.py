"""The etcd session's keep-alives, sent from a thread of their own (Kafka sends its heartbeats from one too).

A broker's event loop busy with thousands of partitions (a failover at 10,000 on a loaded machine) turns
late: keep-alives sent and read on it are late with it, and a session lost for that is a second, needless
failover. This thread has its own event loop and gRPC channel and needs the GIL only for a moment each
second, which a busy event loop gives up every few milliseconds (sys.getswitchinterval). The event loop
reads its replies (``last``) and does the rest: logs, registers again once the session is gone.

A broker whose event loop is hung serves nothing and must still lose its session: the thread refreshes
only while the event loop has turned (``loop_turned``) within ``hung_after_s`` (the session timeout), so a
hung loop is fenced at most two session timeouts after its last turn.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import NamedTuple

import aetcd

from broker.faults import EtcdGap


class Refresh(NamedTuple):
    when: float  # time.monotonic() of the reply or failure
    lease_id: int
    ttl: int | None  # the lease's TTL after the refresh; <= 0: the lease is gone
    error: BaseException | None


class LeaseKeeper:
    def __init__(self, target: tuple[str, int], interval_s: float, hung_after_s: float, gap: EtcdGap) -> None:
        self.target = target
        self.interval_s = interval_s
        self.hung_after_s = hung_after_s
        self.loop_turned = time.monotonic()  # set by the event loop as it reads the replies
        self.gap = gap  # (a fault hook: its check reads two attributes)
        self.lease_id: int | None = None  # the lease to keep alive, set by the event loop
        self.last: Refresh | None = None  # the latest refresh, read by the event loop
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    def keep(self, lease_id: int) -> None:
        self.lease_id = lease_id
        if self._thread is None:
            self._thread = threading.Thread(target=asyncio.run, args=(self._refresh_every(),),
                                            name="etcd-session-keep-alive", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stopped.set()

    async def _refresh_every(self) -> None:
        client = aetcd.Client(*self.target, timeout=5, options={"grpc.initial_reconnect_backoff_ms": 100,
                                                                "grpc.max_reconnect_backoff_ms": 1000})
        try:
            while not self._stopped.is_set():
                await asyncio.sleep(self.interval_s)
                lease_id = self.lease_id
                if time.monotonic() - self.loop_turned > self.hung_after_s:
                    continue  # the session ends with the TTL, as the process's would
                try:
                    self.gap.check(session=True)
                    reply = await client.refresh_lease(lease_id)
                    self.last = Refresh(time.monotonic(), lease_id, reply.TTL, None)
                except Exception as exc:  # noqa: BLE001 -- whatever etcd or gRPC raise, the thread goes on (the loop logs it)
                    self.last = Refresh(time.monotonic(), lease_id, None, exc)
        finally:
            await client.close()
