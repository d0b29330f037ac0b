"""The broker's etcd session: the connection, its lease and keep-alives, the broker's registration
(/brokers/ids/<node.id>) and the producer-id blocks it reserves (/latest_producer_id_block).
"""

from __future__ import annotations

import logging
import socket
import time

import aetcd

from broker.network.listeners import advertised_endpoints, inter_broker_endpoint
from broker.transaction.producer_ids import BLOCK_SIZE
from storage import clock

from .metadata import BrokerInfo
from .store import NodeIdInUse

log = logging.getLogger("moldau.etcd")

RETRY_S = 0.5
COUNTDOWN_S = 5.0  # between the lines counting down an earlier run's session
KEEPALIVE_S = 1.0  # between the session's keep-alives
RENEWAL_WINDOW_S = 3.0  # a registration's lease renewed through two such windows is a live broker's


def parse_connect(value: str) -> tuple[list[tuple[str, int]], str]:
    """'host:port[,host:port...][/chroot]' -> ([(host, port)...], chroot), as zookeeper.connect."""
    hosts, slash, chroot = value.partition("/")
    endpoints = []
    for item in hosts.split(","):
        host, _, port = item.strip().rpartition(":")
        endpoints.append((host or "127.0.0.1", int(port)))
    return endpoints, ("/" + chroot.strip("/")) if slash and chroot.strip("/") else ""


def grpc_target(endpoints: list[tuple[str, int]]) -> tuple[str, int]:
    """aetcd dials f"{host}:{port}"; several endpoints become gRPC's "ipv4:a:p,b:p,..." address list
    (names resolved now), split so that aetcd's join gives it back."""
    if len(endpoints) == 1:
        return endpoints[0]
    addresses = [f"{ip}:{port}" for host, port in endpoints
                 for ip in dict.fromkeys(info[4][0] for info in socket.getaddrinfo(host, port, socket.AF_INET))]
    target, _, last_port = ("ipv4:" + ",".join(addresses)).rpartition(":")
    return target, int(last_port)


def renewed_throughout(samples: list[tuple[float, int]], window_s: float) -> bool:
    """Whether a lease whose (time, TTL in whole seconds) samples these are, oldest first, was renewed through
    two windows of ``window_s`` back to back: one nobody renews loses a second of TTL each second, and a
    single renewal (a new etcd leader renews every lease) lifts it in one window only. Keep-alives more
    frequent than a second keep the TTL level, so rises alone would not show them."""
    def at(t: float) -> int | None:
        return next((ttl for when, ttl in reversed(samples) if when <= t), None)

    end, ttl = samples[-1]
    middle, start = at(end - window_s), at(end - 2 * window_s)
    return start is not None and middle is not None and ttl >= middle - 1 and middle >= start - 1


class EtcdSession:
    """The session part of EtcdMetadataStore: connect, register, keep the lease alive, leave."""

    async def _connect(self) -> None:
        """One gRPC channel to every endpoint: when the member it talks to goes, the next call goes to
        another (gRPC's pick_first over an address list, as etcd's own client balances)."""
        host, port = grpc_target(self.endpoints)
        # gRPC backs off reconnecting for up to 2 minutes; an etcd back from an outage must hear the
        # keep-alives within the session timeout (not min_reconnect_backoff_ms: it is also the connect timeout)
        client = aetcd.Client(host, port, timeout=5, options={"grpc.initial_reconnect_backoff_ms": 100,
                                                              "grpc.max_reconnect_backoff_ms": 1000})
        try:
            await client.status()
        except Exception as exc:  # noqa: BLE001 -- the etcd client raises gRPC, aetcd and OS errors alike; logged, tried again
            await client.close()
            raise ConnectionError(f"no etcd endpoint of {self.broker.config['etcd.connect']} answers: {exc}") from None
        self.client = client

    async def _adopt_cluster_id(self) -> None:
        key = self.key("cluster_id")
        ours = self.broker.logs.cluster_id.encode()
        await self.client.transaction(compare=[self.client.transactions.version(key) == 0],
                                      success=[self.client.transactions.put(key, ours)], failure=[])
        found = await self.client.get(key)
        self.broker.logs.cluster_id = found.value.decode()

    async def _register(self, first: bool = False) -> None:
        """Register under a new lease. A registration left by this node.id's previous run blocks it until its
        lease expires (etcd.session.timeout.ms after a crash), as a ZooKeeper ephemeral node does; one whose
        lease is renewed meanwhile belongs to a live broker, and a starting broker (``first``) refuses to run
        beside it (NodeIdInUse), as Kafka refuses a broker.id registered by another session."""
        node = self.broker.node_id
        key = self.key("brokers", "ids", node)
        info = self._registration()
        self.lease = await self.client.lease(self.ttl)
        seen: list[tuple[float, int]] = []  # (when, TTL) of the registration's lease, oldest first
        next_line = 0.0
        while True:
            ok, _ = await self.client.transaction(
                compare=[self.client.transactions.version(key) == 0],
                success=[self.client.transactions.put(key, info.encode(), lease=self.lease)], failure=[])
            if ok:
                break
            found = await self.client.get(key)
            if found is not None:
                other = BrokerInfo.decode(found.value)
                ttl = (await self.client.get_lease_info(found.lease, keys=False)).TTL
                seen.append((clock.monotonic(), ttl))
                if first and renewed_throughout(seen, RENEWAL_WINDOW_S):
                    raise NodeIdInUse(f"node.id {node} is in use by a live broker at {other.host}:{other.port} "
                                      f"(its etcd session is being renewed); give this broker another node.id")
                if clock.monotonic() >= next_line:
                    log.info("node.id %d is still registered by an earlier run (%s:%d); its session expires in "
                             "%d s, waiting", node, other.host, other.port, max(ttl, 0))
                    next_line = clock.monotonic() + COUNTDOWN_S
            await self.lease.refresh()
            await clock.sleep(RETRY_S)
        log.info("registered as broker %d in etcd (session timeout %ds)", node, self.ttl)

    def _registration(self) -> BrokerInfo:
        host, port = inter_broker_endpoint(self.broker.config)
        return BrokerInfo(self.broker.node_id, host, port, None, advertised_endpoints(self.broker.config))

    def advertised_changed(self) -> None:
        self.broker.supervisor.spawn(self._register_endpoints())

    def peer_connection_failed(self, node_id: int, exc: BaseException) -> None:
        self.failure_detector.connection_failed(node_id, exc)

    async def _register_endpoints(self) -> None:
        """The registration again, with the endpoints advertised.listeners names now (a session that ended
        meanwhile registers them anew)."""
        try:
            await self.client.put(self.key("brokers", "ids", self.broker.node_id), self._registration().encode(),
                                  lease=self.lease)
            log.info("registered the advertised endpoints %s", self._registration().endpoints)
        except Exception as exc:  # noqa: BLE001 -- the etcd client raises gRPC, aetcd and OS errors alike; logged, tried again
            log.warning("could not register the new advertised endpoints: %s", exc)

    async def _keep_alive(self) -> None:
        """The keep-alives go every second from the LeaseKeeper's thread, so a busy event loop does not delay
        them (docs/performance.md); this reads their replies, and registers again once the session is gone."""
        lost = False
        seen = None
        self.lease_keeper.keep(self.lease.id)
        while True:
            await clock.sleep(min(KEEPALIVE_S, self.ttl / 3))
            self.lease_keeper.loop_turned = time.monotonic()  # (real time: the keeper thread compares it with its own)
            refresh = self.lease_keeper.last
            if refresh is None or refresh is seen or refresh.lease_id != self.lease.id:
                continue
            seen = refresh
            try:
                if refresh.error is not None:
                    raise refresh.error
                if refresh.ttl <= 0:
                    if not lost:
                        log.error("etcd session expired; registering again")
                    lost = True
                    await self._register()
                    self.lease_keeper.keep(self.lease.id)
                    self.controller.session_renewed()
                elif lost:
                    log.info("etcd session kept alive again")
                lost = False
            except Exception as exc:  # noqa: BLE001 -- the etcd client raises gRPC, aetcd and OS errors alike; logged, tried again
                if not lost:
                    log.error("etcd session keep-alive failed: %s", exc)
                lost = True

    def request_block(self) -> None:
        if self._reserving is None or self._reserving.done():
            self._reserving = self.broker.supervisor.spawn(self._adopt_next_block())

    async def _adopt_next_block(self) -> None:
        try:
            self.broker.producer_ids.adopt_block(await self._reserve_producer_id_block())
        except Exception as exc:  # noqa: BLE001 -- etcd away: InitProducerId answers a retriable error, asks again
            log.warning("could not reserve producer ids: %s", exc)

    async def _reserve_producer_id_block(self) -> int:
        """The start of a block of producer ids no other broker has: a compare-and-swap on the one counter."""
        key = self.key("latest_producer_id_block")
        tx = self.client.transactions
        while True:
            found = await self.client.get(key)
            start = int(found.value) if found is not None else 0
            guard = tx.mod(key) == found.mod_revision if found is not None else tx.version(key) == 0
            ok, _ = await self.client.transaction(
                compare=[guard], success=[tx.put(key, str(start + BLOCK_SIZE).encode())], failure=[])
            if ok:
                return start
