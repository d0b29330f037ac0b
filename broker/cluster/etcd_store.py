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

The store is put together from one part per concern: the session (etcd_session.py: connection, lease,
registration, producer-id blocks), the view (etcd_view.py: resync, watch, audit, applying keys) and the
topic writes (etcd_topics.py); this module starts and stops them and holds the periodic ISR and high
watermark work.
"""

from __future__ import annotations

import asyncio
import logging
import math

import aetcd

from broker import faults
from broker.cluster.etcd_session import (
    KEEPALIVE_S,
    EtcdSession,
    grpc_target,
    parse_connect,
)
from broker.cluster.etcd_topics import EtcdTopicWrites
from broker.cluster.etcd_view import EtcdView
from broker.shutdown import within
from storage import clock
from storage.catalog import TopicMetadata

from . import client_security
from .controller import Controller
from .etcd_configs import EtcdConfigs
from .etcd_security import ClusterSecurity
from .failure_detector import FailureDetector
from .fetcher import ReplicaFetcherManager
from .lease_keeper import LeaseKeeper
from .metadata import MetadataCache
from .store import MetadataStore

log = logging.getLogger("moldau.etcd")


class EtcdMetadataStore(EtcdSession, EtcdView, EtcdTopicWrites, MetadataStore):
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

    async def stop(self, controlled: bool) -> None:
        """Controlled shutdown (SIGTERM) hands leadership to other in-sync replicas first, then the session
        is revoked, so the controller acts now instead of after the session timeout."""
        self.failure_detector.stopped = True
        self.lease_keeper.stop()
        if controlled and self.client is not None:
            try:
                await within(10, self.controller.hand_over_leadership(self.broker.node_id), "the hand-over")
            except Exception as exc:  # noqa: BLE001 -- the etcd client raises gRPC, aetcd and OS errors alike; logged, tried again
                log.warning("controlled shutdown could not move every leadership away: %s", exc)
        for task in self._tasks:
            task.cancel()
        self._write_high_watermarks()
        if self.client is not None:
            try:
                if self.lease is not None:
                    await within(5, self.lease.revoke(), "revoking the session's lease")
                await within(5, self.client.close(), "closing the etcd client")
            except Exception as exc:  # noqa: BLE001 -- etcd away: the session expires by itself
                log.warning("closing the etcd session: %s", exc)

    # --- producer ids ----------------------------------------------------------------------------

    # --- the metadata cache --------------------------------------------------------------------

    # --- writes -----------------------------------------------------------------------------------

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
