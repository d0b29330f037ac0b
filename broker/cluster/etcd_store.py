"""The cluster's metadata in etcd: broker registration, controller election, topics and partition states.

Key layout (under the chroot of ``etcd.connect``; docs/architecture.md says who writes each key):

    /cluster_id                 the cluster id (first broker to start, create-if-absent)
    /brokers/ids/<node.id>      BrokerInfo, under the broker's lease (its session)
    /controller                 {"broker_id": n}, under the controller's lease (create-if-absent = election)
    /latest_producer_id_block   next free block of producer ids (compare-and-swap)
    /topics/<name>              {"topic_id", "partitions", "configs"}
    /partitions/<name>/<p>      PartitionState: leader, leader_epoch, isr, replicas
    /creating/<name>            {"broker_id", "attempt"}: a create or growth of <name> under way, under its
                                broker's lease (create-if-absent); its last step deletes it
    /acls/<id>, /scram_credentials/<user>   ACLs and SCRAM credentials (etcd_security.py)
    /client_quotas/<entity>, /configs/brokers/<id or <default>>   client quotas and dynamic broker
                                configs (etcd_configs.py, which also writes topic keys' configs)

Every broker watches the whole prefix and keeps a MetadataCache; the
ReplicaManager follows the partition states it holds. Partition states are
only ever written by a transaction that compares the key's mod revision
with the one the writer read, so of two writers acting on the same state
only one wins.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import socket
import time

import aetcd
from aetcd import rpc
from aetcd import utils as etcd_utils

from broker import faults
from broker.coordinator.internal_topics import INTERNAL_TOPIC_SETTINGS
from broker.network.listeners import advertised_endpoints, inter_broker_endpoint
from broker.shutdown import within
from broker.transaction.producer_ids import BLOCK_SIZE
from storage import clock
from storage.catalog import TopicMetadata
from storage.errors import TopicExists, UnknownTopic
from storage.files import decode_uuid, encode_uuid, random_uuid
from storage.log_manager import CREATE_STEP

from . import client_security
from .controller import Controller
from .etcd_configs import CLIENT_QUOTAS, CONFIGS, EtcdConfigs
from .etcd_security import ACLS, SCRAM, ClusterSecurity
from .failure_detector import FailureDetector
from .fetcher import ReplicaFetcherManager
from .lease_keeper import LeaseKeeper
from .metadata import NO_LEADER, BrokerInfo, MetadataCache, PartitionState, TopicChangeInProgress
from .store import MetadataStore, NodeIdInUse

log = logging.getLogger("moldau.etcd")

RETRY_S = 0.5
COUNTDOWN_S = 5.0  # between the lines counting down an earlier run's session
KEEPALIVE_S = 1.0  # between the session's keep-alives
RENEWAL_WINDOW_S = 3.0  # a registration's lease renewed through two such windows is a live broker's
AUDIT_CONFIRM_S = 1.0  # a difference the audit finds counts once the next audit, this much later, finds it too
# etcd's default --max-txn-ops: a transaction with more operations is refused
MAX_TXN_OPS = 128
CREATING = "creating"  # /creating/<name>: the claim of a topic write in several steps


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


class EtcdMetadataStore(MetadataStore):
    def __init__(self, broker) -> None:
        super().__init__(broker)
        self.cache = MetadataCache()
        self.endpoints, self.chroot = parse_connect(broker.config["etcd.connect"])
        self.ttl = max(2, math.ceil(broker.config["etcd.session.timeout.ms"] / 1000))
        self.client: aetcd.Client | None = None
        self.lease = None
        self.topics: dict[str, TopicMetadata] = {}  # as etcd has them
        self._topic_ids: dict = {}  # topic id -> the TopicMetadata in ``topics``
        self.controller = Controller(self)
        self.failure_detector = FailureDetector(self)
        self.client_security = client_security.from_config(broker.config)
        broker.replicas.fetchers = ReplicaFetcherManager(broker)
        self._tasks: list[asyncio.Task] = []
        self._creating: set[str] = set()
        self._following: set[str] = set()  # topics whose local logs a task is making etcd's (_follow_topic)
        self._reserving: asyncio.Future | None = None
        self.revision = 0  # the etcd revision the view is at
        # every key applied, with the mod revision of its value: a resync drops those etcd no longer has
        self.applied: dict[str, int] = {}
        self._stale = False  # the watch broke: the view must be read again before watching on
        self._watch_stream = None
        self.resyncs = 0
        self.divergences = 0  # differences between the view and etcd the audit found (each repaired)
        self.etcd_gap = faults.etcd_gap(broker.config.log_dir)
        self.lease_keeper = LeaseKeeper(grpc_target(self.endpoints), min(KEEPALIVE_S, self.ttl / 3), self.ttl,
                                        self.etcd_gap)
        self.security: ClusterSecurity | None = None
        self.configs = EtcdConfigs(self)
        self.topic_write_delay_s = faults.topic_write_delay_s()
        self.kill_after_topic_write_step = faults.topic_write_killer()

    def key(self, *parts) -> bytes:
        return (self.chroot + "/" + "/".join(str(p) for p in parts)).encode()

    # --- connection, registration ------------------------------------------------------------

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
        except Exception as exc:
            await client.close()
            raise ConnectionError(f"no etcd endpoint of {self.broker.config['etcd.connect']} answers: {exc}") from None
        self.client = client

    async def start(self) -> None:
        await self._connect()
        await self._adopt_cluster_id()
        await self._register(first=True)
        self.broker.producer_ids.block_source = self
        self.broker.producer_ids.adopt_block(await self._reserve_producer_id_block())
        self.security = ClusterSecurity(self)
        for repair in self.broker.logs.read_high_watermarks():
            log.warning("%s", repair)
        await self._resync()
        self._tasks = [self.broker.supervisor.start(name, loop) for name, loop in (
            ("etcd-session", self._keep_alive), ("etcd-watch", self._watch),
            ("controller-event-thread", self.controller.run),
            ("auto-leader-rebalance-task", self.controller.rebalance_leaders), ("isr-expiration", self._check_isrs),
            ("highwatermark-checkpoint", self._checkpoint_high_watermarks), ("etcd-view-audit", self._audit))]
        if self.etcd_gap.path is not None:
            self._tasks.append(self.broker.supervisor.start("etcd-gap-fault", self._inject_etcd_gaps))

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
        except Exception as exc:
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
            except Exception as exc:
                if not lost:
                    log.error("etcd session keep-alive failed: %s", exc)
                lost = True

    async def stop(self, controlled: bool) -> None:
        """Controlled shutdown (SIGTERM) hands leadership to other in-sync replicas first, then the session
        is revoked, so the controller acts now instead of after the session timeout."""
        self.failure_detector.stopped = True
        self.lease_keeper.stop()
        if controlled and self.client is not None:
            try:
                await within(10, self.controller.hand_over_leadership(self.broker.node_id), "the hand-over")
            except Exception as exc:
                log.warning("controlled shutdown could not move every leadership away: %s", exc)
        for task in self._tasks:
            task.cancel()
        self._write_high_watermarks()
        if self.client is not None:
            try:
                if self.lease is not None:
                    await within(5, self.lease.revoke(), "revoking the session's lease")
                await within(5, self.client.close(), "closing the etcd client")
            except Exception as exc:  # etcd away: the session expires by itself
                log.warning("closing the etcd session: %s", exc)

    # --- producer ids ----------------------------------------------------------------------------

    def request_block(self) -> None:
        if self._reserving is None or self._reserving.done():
            self._reserving = self.broker.supervisor.spawn(self._adopt_next_block())

    async def _adopt_next_block(self) -> None:
        try:
            self.broker.producer_ids.adopt_block(await self._reserve_producer_id_block())
        except Exception as exc:  # etcd away: InitProducerId answers a retriable error, asks again
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

    # --- the metadata cache --------------------------------------------------------------------

    async def _resync(self) -> None:
        """Make the view etcd's at one revision R, read now, as if every change since the revision applied
        had come through the watch: each key applied before and absent at R is applied as a deletion, with
        a watch event's side effects (a broker leaving, the controller gone, a topic's logs deleted, a
        partition's replica stopped), then every key at R. The watch goes on from R + 1."""
        self.etcd_gap.check()
        found = await self.client.get_prefix(self.key(""))
        revision = found.header.revision
        if revision < self.revision:  # a linearizable read is never older; the view never moves back
            raise ConnectionError(f"etcd answered at revision {revision}, before the {self.revision} applied")
        present = {kv.key.decode(): kv for kv in found}
        # (sorted: partition states before topics; a key this broker wrote after R is not R's to drop)
        for key in sorted(k for k, applied_at in self.applied.items() if k not in present and applied_at <= revision):
            self._apply(key, None, revision)
        entries = sorted(((kv.key.decode(), kv.value, kv.mod_revision) for kv in found), key=lambda e: e[0])
        # topics before partitions, so each partition's log exists when its state arrives
        for key, value, mod_revision in entries:
            if self._relative(key).startswith("topics/"):
                self._apply(key, value, mod_revision)
        self._drop_deleted_topics()
        for key, value, mod_revision in entries:
            if not self._relative(key).startswith("topics/"):
                self._apply(key, value, mod_revision)
        self.revision = revision
        self.resyncs += 1
        self.controller.resynced()

    def _relative(self, key: str) -> str:
        return key[len(self.chroot) + 1 :]

    async def _watch(self) -> None:
        """etcd's changes in revision order. Any end of the watch (an error, a member gone, a start revision
        etcd compacted away, a fault hook) may have lost changes: the view is read again, then watched on."""
        failing = False  # an etcd outage is logged once, not at every retry
        while True:
            try:
                if self._stale:
                    await self._resync()
                    if failing:
                        log.info("etcd answers again: the view is etcd's at revision %d", self.revision)
                    self._stale = failing = False
                self._watch_stream = await self.client.watch_prefix(self.key(""), start_revision=self.revision + 1)
                if self._stale:  # broken while it was being set up
                    await self._watch_stream.cancel()
                async for event in self._watch_stream:
                    self.revision = max(self.revision, event.kv.mod_revision)
                    if self.etcd_gap.drops():
                        continue
                    value = event.kv.value if event.kind == "PUT" else None
                    self._apply(event.kv.key.decode(), value, event.kv.mod_revision)
                self._stale = True
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if not failing:
                    log.warning("etcd watch ended (%s); reading the whole view again once etcd answers",
                                "history compacted past revision %d" % self.revision
                                if isinstance(exc, aetcd.exceptions.RevisionCompactedError) else exc)
                failing = self._stale = True
                await clock.sleep(RETRY_S)
            finally:
                self._watch_stream = None

    def _break_watch(self) -> None:
        """Ends the watch under way, so the view is read again."""
        self._stale = True
        if self._watch_stream is not None:
            self.broker.supervisor.spawn(self._watch_stream.cancel())

    async def _audit(self) -> None:
        """The operator's check that the view is etcd's, every etcd.audit.interval.ms: a difference found
        twice in a row (the second look AUDIT_CONFIRM_S later, past this broker's own writes that run
        ahead of its watch) is counted, logged and repaired by a resync."""
        suspects: set[str] = set()
        while True:
            await clock.sleep(AUDIT_CONFIRM_S if suspects else self.broker.config["etcd.audit.interval.ms"] / 1000)
            if self._stale:
                suspects = set()
                continue
            try:
                found = await self.divergences_from_etcd()
            except Exception as exc:  # etcd away: the watch's own recovery reads the view again
                log.debug("etcd audit skipped: %s", exc)
                suspects = set()
                continue
            confirmed, suspects = (found & suspects, set()) if suspects else (set(), found)
            if confirmed and not self._stale:
                self.divergences += 1
                log.error("the view of the cluster differs from etcd's at revision %d (%s); reading it again",
                          self.revision, ", ".join(sorted(confirmed)[:10]))
                self._break_watch()

    async def divergences_from_etcd(self) -> set[str]:
        """The keys on which the view differs from etcd's at the revision the view is at: each key applied
        with its value's mod revision, and what the cache made of them (live brokers, controller, topics,
        partition states). Keys this broker wrote and applied ahead of its watch are left out."""
        at, applied = self.revision, dict(self.applied)
        brokers, controller = set(self.cache.brokers), self.cache.controller_id
        topics = {name: topic.num_partitions for name, topic in self.topics.items()}
        partitions = {(t, p): state.version for (t, p), state in self.cache.partitions.items()}
        prefix = self.key("")
        request = rpc.RangeRequest(key=prefix, range_end=etcd_utils.prefix_range_end(prefix), revision=at)
        response = await self.client.kvstub.Range(request, timeout=10, metadata=self.client.metadata)
        held = {kv.key.decode(): kv for kv in response.kvs}
        ahead = {key for key, revision in applied.items() if revision > at}
        differ = {key for key in held.keys() | applied.keys()
                  if key not in ahead and (key not in held or applied.get(key) != held[key].mod_revision)}
        relative = {self._relative(key): kv for key, kv in held.items()}
        if brokers != {int(k.rsplit("/", 1)[1]) for k in relative if k.startswith("brokers/ids/")}:
            differ.add(self.key("brokers", "ids", "").decode())
        if controller != (json.loads(relative["controller"].value)["broker_id"] if "controller" in relative
                          else NO_LEADER):
            differ.add(self.key("controller").decode())
        for name in topics.keys() | {k[len("topics/"):] for k in relative if k.startswith("topics/")}:
            kv = relative.get(f"topics/{name}")
            if topics.get(name) != (json.loads(kv.value)["partitions"] if kv else None):
                differ.add(self.key("topics", name).decode())
        for t, p in partitions.keys() | {(k.split("/")[1], int(k.split("/")[2])) for k in relative
                                         if k.startswith("partitions/")}:
            kv, version = relative.get(f"partitions/{t}/{p}"), partitions.get((t, p))
            if (version or 0) <= at and version != (kv.mod_revision if kv else None):
                differ.add(self.key("partitions", t, p).decode())
        return differ

    async def _inject_etcd_gaps(self) -> None:
        while True:
            await clock.sleep(0.2)
            if self.etcd_gap.poll():
                self._break_watch()

    def _apply(self, key: str, value: bytes | None, revision: int) -> None:
        if value is None:
            self.applied.pop(key, None)
        else:
            self.applied[key] = revision
        parts = self._relative(key).split("/")
        try:
            if parts[0] == "brokers" and len(parts) == 3:
                self._apply_broker(int(parts[2]), value)
            elif parts[0] == "controller":
                self.cache.controller_id = json.loads(value)["broker_id"] if value else NO_LEADER
                self.controller.controller_changed()
            elif parts[0] == "topics" and len(parts) == 2:
                self._apply_topic(parts[1], value)
            elif parts[0] == "partitions" and len(parts) == 3:
                self._apply_partition(parts[1], int(parts[2]), value, revision)
            elif parts[0] == CREATING and len(parts) == 2 and value is None:
                self.controller.topic_claim_released()
            elif parts[0] in (ACLS, SCRAM) and len(parts) == 2:
                self.security.apply(parts[0], parts[1], value)
            elif parts[0] == CLIENT_QUOTAS and len(parts) == 2:
                self.configs.apply_client_quota(parts[1], value)
            elif parts[0] == CONFIGS and len(parts) == 3 and parts[1] == "brokers":
                self.configs.apply_broker_configs(parts[2], value)
            elif parts[0] == CONFIGS and len(parts) == 3 and parts[1] == "groups":
                self.configs.apply_group_configs(parts[2], value)
        except (ValueError, KeyError, TypeError) as exc:
            log.error("ignoring unreadable etcd key %s: %s", key, exc)

    def _apply_broker(self, node_id: int, value: bytes | None) -> None:
        if value is None:
            if self.cache.brokers.pop(node_id, None) is not None:
                log.info("broker %d left the cluster", node_id)
        else:
            self.cache.brokers[node_id] = BrokerInfo.decode(value)
        self.controller.brokers_changed()

    def _apply_topic(self, name: str, value: bytes | None) -> None:
        gone = self.topics.pop(name, None)
        if gone is not None:
            self._topic_ids.pop(gone.topic_id, None)
        if value is None:
            for p in range(gone.num_partitions if gone else 0):
                self.cache.partitions.pop((name, p), None)
                self.broker.replicas.apply_state(name, p, None)
        else:
            d = json.loads(value)
            topic = self.topics[name] = TopicMetadata(name, decode_uuid(d["topic_id"]), int(d["partitions"]),
                                                      dict(d["configs"]))
            self._topic_ids[topic.topic_id] = topic
        self._follow_topic(name)

    def topic_by_id(self, topic_id) -> TopicMetadata | None:
        return self._topic_ids.get(topic_id)

    def _follow_topic(self, name: str) -> None:
        """Make this broker's logs of topic ``name`` etcd's: at once when a few partitions' files are made or
        removed, else in steps by a task -- thousands take seconds of disk work, during which the event loop
        keeps serving (and keeps the session: a stall of the session timeout would end it)."""
        if name in self._following:
            return  # the task under way looks again when it is done
        local, topic = self.broker.logs.topic(name), self.topics.get(name)
        work = topic.num_partitions if topic is not None else 0
        if local is not None:
            work = local.num_partitions if topic is None or local.topic_id != topic.topic_id else \
                work - local.num_partitions
        if work <= CREATE_STEP:
            for steps in self._topic_steps(name):
                for _ in steps:
                    pass
            return
        self._following.add(name)
        self.broker.supervisor.spawn(self._follow_in_steps(name))

    async def _follow_in_steps(self, name: str) -> None:
        from broker.supervisor import in_steps  # (broker.broker imports the stores)

        try:
            while True:
                for steps in self._topic_steps(name):
                    await in_steps(steps)
                local, topic = self.broker.logs.topic(name), self.topics.get(name)
                if (local is None and topic is None) or (local is not None and topic is not None and local.topic_id
                                                         == topic.topic_id and local.num_partitions >= topic.num_partitions):
                    return
        except Exception as exc:  # a full disk: the next change of the topic, or a restart, tries again
            log.error("could not make topic %s's local logs the cluster's: %s", name, exc)
        finally:
            self._following.discard(name)

    def _topic_steps(self, name: str):
        """LogManager's step generators that make the local topic etcd's, one after the other, then one that
        applies the partition states that arrived before their logs."""
        logs = self.broker.logs
        local, topic = logs.topic(name), self.topics.get(name)
        if local is not None and (topic is None or local.topic_id != topic.topic_id):
            if topic is None:
                log.info("deleted topic %s", name)
            else:
                log.warning("local topic %s has id %s, the cluster's has %s: replacing it", name, local.topic_id,
                            topic.topic_id)
            for p in range(local.num_partitions):  # (deleted and created again while the watch was down)
                self.broker.replicas.apply_state(name, p, None)
            yield logs.delete_topic_steps(name)
            local = None
        if topic is None:
            return
        if local is None:
            yield logs.create_topic_steps(name, topic.num_partitions, topic.configs, topic_id=topic.topic_id)
        else:
            self.configs.apply_topic_configs(name, topic.configs)
            if local.num_partitions < topic.num_partitions:
                yield logs.add_partitions_steps(name, topic.num_partitions)
        yield self._apply_states_steps(name, topic.num_partitions)

    def _apply_states_steps(self, name: str, partitions: int):
        """Apply the partitions' states, yielding every CREATE_STEP (each leadership taken writes its
        leader-epoch checkpoint)."""
        for p in range(partitions):
            state = self.cache.partition_state(name, p)
            if state is not None:
                self.broker.replicas.apply_state(name, p, state)
            if p % CREATE_STEP == CREATE_STEP - 1:
                yield

    def _drop_deleted_topics(self) -> None:
        """Topics deleted while this broker was away."""
        for name in [n for n in self.broker.logs.topics if n not in self.topics]:
            log.info("topic %s was deleted from the cluster; deleting its local logs", name)
            self.broker.logs.delete_topic(name)

    def _apply_partition(self, topic: str, index: int, value: bytes | None, revision: int) -> None:
        key = (topic, index)
        if value is None:
            self.cache.partitions.pop(key, None)
            self.broker.replicas.apply_state(topic, index, None)
            return
        current = self.cache.partitions.get(key)
        if current is not None and current.version >= revision:
            return  # already applied from our own write
        state = PartitionState.decode(value, revision)
        self.cache.partitions[key] = state
        self.broker.replicas.apply_state(topic, index, state)
        self.controller.partition_changed(topic, index, state)

    # --- writes -----------------------------------------------------------------------------------

    async def alter_partition(self, topic: str, index: int, expected: PartitionState, new: PartitionState) -> bool:
        """Compare-and-swap a partition's state on the mod revision ``expected`` was read at."""
        return (await self.alter_partitions([(topic, index, expected, new)]))[0]

    async def alter_partitions(self, changes: list[tuple[str, int, PartitionState, PartitionState]]) -> list[bool]:
        """Many compare-and-swaps (topic, index, expected, new) in few transactions: each holds all of a chunk's
        comparisons and writes (within MAX_TXN_OPS, a read of one written key giving the transaction's
        revision), and applies them here at once. A chunk whose comparison fails somewhere (a state that moved
        meanwhile) goes one partition at a time. Returns whether each change was written."""
        tx = self.client.transactions
        written: list[bool] = []
        size = MAX_TXN_OPS - 1
        for i in range(0, len(changes), size):
            chunk = changes[i:i + size]
            keys = [self.key("partitions", topic, index) for topic, index, _, _ in chunk]
            ok, responses = await self.client.transaction(
                compare=[tx.mod(key) == expected.version for key, (_, _, expected, _) in zip(keys, chunk)],
                success=[tx.put(key, new.encode()) for key, (_, _, _, new) in zip(keys, chunk)] + [tx.get(keys[0])],
                failure=[])
            if not ok:
                if len(chunk) == 1:
                    written.append(False)
                else:
                    written += [(await self.alter_partitions([change]))[0] for change in chunk]
                continue
            revision = responses[-1][0][1].mod_revision
            for key, (_, _, _, new) in zip(keys, chunk):
                self._apply(key.decode(), new.encode(), revision)
            written += [True] * len(chunk)
        return written

    async def apply_current(self, key: bytes) -> None:
        """A key this broker just wrote, applied now (so its next answers have it) as etcd has it."""
        found = await self.client.get(key)
        if found is not None:
            self._apply(key.decode(), found.value, found.mod_revision)

    async def create_topic(self, name: str, assignment: dict[int, list[int]], configs: dict[str, str],
                           topic_id=None) -> TopicMetadata:
        topic_id = topic_id or random_uuid()
        topic = {"topic_id": encode_uuid(topic_id), "partitions": len(assignment), "configs": configs}
        absent = self.client.transactions.version(self.key("topics", name)) == 0
        await self._write_topic(name, topic, assignment, absent, TopicExists(f"topic {name!r} already exists"))
        log.info("created topic %s: %d partition(s), first %s", name, len(assignment),
                 {p: r for p, r in sorted(assignment.items())[:5]})
        # thousands of partitions' logs may take longer here: etcd has the topic, and so has the answer
        return await self._wait_local(name, len(assignment)) or TopicMetadata(name, topic_id, len(assignment), configs)

    async def _write_topic(self, name: str, topic: dict, assignment: dict[int, list[int]], guard,
                           conflict: Exception) -> None:
        """The new partitions' first states (first replica leads, epoch 0, ISR = replicas), then the topic
        key. etcd refuses a transaction of more than MAX_TXN_OPS operations, so this takes steps, and two
        creates of one name (on two brokers) could mix theirs, a creator's crash leave some behind. So the
        first step claims the name: /creating/<name> created if absent, under this broker's lease (it goes
        with a dead broker's session), and a create deletes what a dead creator left of the name; every
        later step holds only while the claim is this one's and ``guard`` (the topic key as read) holds;
        the last writes the topic key and deletes the claim. No broker serves a partition its topic key
        does not count. Raises ``conflict`` when the guard fails, TopicChangeInProgress when another
        request holds the claim."""
        tx = self.client.transactions
        claim = self.key(CREATING, name)
        ours = json.dumps({"broker_id": self.broker.node_id, "attempt": encode_uuid(random_uuid())}).encode()
        claiming = [tx.put(claim, ours, lease=self.lease)]
        if min(assignment) == 0:  # a create: no state of an earlier attempt survives
            prefix = self.key("partitions", name, "")
            claiming.append(tx.delete(prefix, etcd_utils.prefix_range_end(prefix)))
        if not await self._topic_write_step([guard, tx.version(claim) == 0], claiming):
            raise await self._refusal(name, ours, conflict, claimed=False)
        states = [tx.put(self.key("partitions", name, p),
                         PartitionState(replicas[0], 0, tuple(replicas), tuple(replicas)).encode())
                  for p, replicas in sorted(assignment.items())]
        steps = [states[i:i + MAX_TXN_OPS] for i in range(0, len(states), MAX_TXN_OPS)]
        last = [tx.put(self.key("topics", name), json.dumps(topic).encode()), tx.delete(claim)]
        if len(steps[-1]) + len(last) <= MAX_TXN_OPS:
            last = steps.pop() + last
        held = [guard, tx.value(claim) == ours]
        try:
            for i, ops in enumerate(steps + [last]):
                if not await self._topic_write_step(held, ops):
                    raise await self._refusal(name, ours, conflict, claimed=True)
                if i < len(steps):
                    self.kill_after_topic_write_step()
        except (Exception, asyncio.CancelledError):  # once the claim is gone the controller drops what was written
            await self._release_claim(name, ours)
            raise

    async def _release_claim(self, name: str, ours: bytes) -> None:
        """Deletes the claim; if etcd stays away for a session timeout, the claim goes with the session."""
        tx = self.client.transactions
        claim = self.key(CREATING, name)
        deadline = asyncio.get_running_loop().time() + self.ttl
        while True:
            try:
                await self.client.transaction(compare=[tx.value(claim) == ours], success=[tx.delete(claim)],
                                              failure=[])
                return
            except Exception as exc:
                if asyncio.get_running_loop().time() > deadline:
                    log.warning("could not release the claim on topic %s (%s); it ends with the etcd session",
                                name, exc)
                    return
                await clock.sleep(RETRY_S)

    async def _topic_write_step(self, compare: list, ops: list) -> bool:
        if self.topic_write_delay_s:
            await clock.sleep(self.topic_write_delay_s)
        ok, _ = await self.client.transaction(compare=compare, success=ops, failure=[])
        return ok

    async def _refusal(self, name: str, ours: bytes, conflict: Exception, claimed: bool) -> Exception:
        """Why a step of a topic write failed: another request's claim, ours lapsed, or ``conflict``."""
        found = await self.client.get(self.key(CREATING, name))
        if found is not None and found.value != ours:
            return TopicChangeInProgress(f"broker {json.loads(found.value)['broker_id']} is creating topic {name!r} "
                                         "or partitions of it; retry")
        if found is None and claimed:
            return TopicChangeInProgress(f"the claim on topic {name!r} lapsed with this broker's etcd session; retry")
        return conflict

    async def _wait_local(self, name: str, partitions: int) -> TopicMetadata:
        """Until the watch has brought the change here, so this broker's next answers include it."""
        for _ in range(100):
            topic = self.broker.logs.topic(name)
            if topic is not None and topic.num_partitions >= partitions and all(
                    self.cache.partition_state(name, p) for p in range(partitions)):
                return topic
            await clock.sleep(0.05)
        return self.broker.logs.topic(name)

    def auto_create(self, name: str, num_partitions: int) -> TopicMetadata | None:
        """Started in the background; the client retries (LEADER_NOT_AVAILABLE) until it is there."""
        if name not in self._creating:
            self._creating.add(name)
            self.broker.supervisor.spawn(self._auto_create(name, num_partitions))
        return None

    async def _auto_create(self, name: str, num_partitions: int) -> None:
        try:
            await self.create_topic(name, self.plan_replicas(num_partitions, -1, None), {})
        except (TopicExists, TopicChangeInProgress):  # made by another request; the client retries
            pass
        except Exception as exc:
            log.warning("could not auto-create topic %s: %s", name, exc)
        finally:
            self._creating.discard(name)

    def topic_creation_pending(self, name: str) -> bool:
        return name in self._creating

    async def ensure_internal_topic(self, name: str) -> bool:
        """The coordinators' topic, created on first need as Kafka does; False while it is not there yet."""
        if name in self.topics and self.broker.logs.topic(name) is not None:
            return True
        partitions_setting, rf_setting, min_isr_setting = INTERNAL_TOPIC_SETTINGS[name]
        config = self.broker.config
        rf = self.internal_replication_factor(config[rf_setting])
        configs = {"cleanup.policy": "compact"}
        if min_isr_setting:
            configs["min.insync.replicas"] = str(min(config[min_isr_setting], rf))
        try:
            await self.create_topic(name, self.plan_replicas(config[partitions_setting], rf, None), configs)
        except (TopicExists, TopicChangeInProgress):
            pass
        return self.broker.logs.topic(name) is not None

    async def alter_topic_configs(self, name: str, change, validate_only: bool) -> dict[str, str]:
        return await self.configs.alter_topic_configs(name, change, validate_only)

    async def alter_client_quotas(self, changes) -> None:
        await self.configs.alter_client_quotas(changes)

    async def alter_broker_configs(self, entity: str, change, validate_only: bool) -> None:
        await self.configs.alter_broker_configs(entity, change, validate_only)

    async def alter_group_configs(self, group_id: str, change, validate_only: bool) -> None:
        await self.configs.alter_group_configs(group_id, change, validate_only)

    def configs_changed(self) -> None:
        self.controller.configs_changed()

    async def create_partitions(self, name: str, assignment: dict[int, list[int]]) -> None:
        tx = self.client.transactions
        key = self.key("topics", name)
        found = await self.client.get(key)
        if found is None:
            raise UnknownTopic(f"unknown topic {name!r}")
        d = json.loads(found.value)
        d["partitions"] = max(assignment) + 1
        await self._write_topic(name, d, assignment, tx.mod(key) == found.mod_revision,
                                TopicExists(f"topic {name!r} changed meanwhile; retry"))
        await self._wait_local(name, d["partitions"])

    async def delete_topic(self, name: str) -> None:
        tx = self.client.transactions
        key = self.key("topics", name)
        ok, _ = await self.client.transaction(
            compare=[tx.version(key) > 0],
            success=[tx.delete(key), tx.delete(self.key("partitions", name, ""), etcd_utils.prefix_range_end(
                self.key("partitions", name, "")))], failure=[])
        if not ok:
            raise UnknownTopic(f"unknown topic {name!r}")
        for _ in range(100):
            if self.broker.logs.topic(name) is None:
                return
            await clock.sleep(0.05)

    async def drop_orphan_partitions(self) -> None:
        """The controller's: partition states that no topic key counts and no claim covers -- left by a
        creator that died between the steps of its write (its claim went with its session). Each delete
        holds only while the topic key is as read and no claim is there."""
        tx = self.client.transactions
        indexes: dict[str, list[int]] = {}
        for t, p in list(self.cache.partitions):
            indexes.setdefault(t, []).append(p)
        suspects = [t for t, ps in indexes.items()
                    if max(ps) >= (self.topics[t].num_partitions if t in self.topics else 0)]
        for name in suspects:
            key, claim = self.key("topics", name), self.key(CREATING, name)
            found = await self.client.get(key)
            count = json.loads(found.value)["partitions"] if found is not None else 0
            orphans = sorted(p for p in indexes[name] if p >= count)
            if found is None:
                prefix = self.key("partitions", name, "")
                guard, deletes = tx.version(key) == 0, [tx.delete(prefix, etcd_utils.prefix_range_end(prefix))]
            else:
                guard, deletes = tx.mod(key) == found.mod_revision, [tx.delete(self.key("partitions", name, p))
                                                                     for p in orphans]
            for i in range(0, len(deletes), MAX_TXN_OPS):
                ok, _ = await self.client.transaction(compare=[guard, tx.version(claim) == 0],
                                                      success=deletes[i:i + MAX_TXN_OPS], failure=[])
                if not ok:  # a write of the name under way or done meanwhile: its end wakes the controller
                    break
            else:
                if orphans:
                    log.warning("dropped the states of partitions %d..%d of topic %s: no topic key counts them "
                                "(a create or growth that did not finish)", orphans[0], orphans[-1], name)

    async def _check_isrs(self) -> None:
        """The leader's periodic ISR check, at half of replica.lag.time.max.ms as in Kafka."""
        while True:
            await clock.sleep(self.broker.config["replica.lag.time.max.ms"] / 2000)
            self.broker.replicas.shrink_isrs()

    async def _checkpoint_high_watermarks(self) -> None:
        while True:
            await clock.sleep(self.broker.config["replica.high.watermark.checkpoint.interval.ms"] / 1000)
            self._write_high_watermarks()

    def _write_high_watermarks(self) -> None:
        try:
            self.broker.logs.checkpoint_high_watermarks()
        except OSError as exc:  # a full disk: the next checkpoint tries again
            log.error("could not checkpoint high watermarks: %s", exc)
