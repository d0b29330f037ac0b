"""Broker state shared by the handlers: config, logs, the metadata store and replicas, parked fetches."""

from __future__ import annotations

import logging

from storage import clock
from storage.catalog import TopicMetadata, validate_topic_name
from storage.cleaner import LogCleaner
from storage.errors import TopicExists
from storage.log_manager import LogManager

from . import faults
from .cluster import stages
from .cluster.metadata import NO_LEADER, MetadataAnswers
from .cluster.replica_manager import ReplicaManager
from .cluster.store import LocalMetadataStore, MetadataStore
from .config.broker_config import DEDUPE_BYTES_PER_KEY, BrokerConfig, broker_log_config
from .config.dynamic_configs import DynamicBrokerConfigs
from .config.group_configs import GroupConfigs
from .coordinator.internal_topics import (
    INTERNAL_TOPICS,
    OFFSETS_TOPIC,
    SHARE_STATE_TOPIC,
    TRANSACTION_STATE_TOPIC,
)
from .errors import ErrorCode
from .fetch.delayed_fetch import FetchPurgatory
from .fetch.fetch_session import FetchSessionCache
from .fetch.log_read import IdleAnswers
from .group.coordinator import GroupCoordinator
from .network.client_quotas import ClientQuotas
from .network.descriptors import Budget
from .network.listeners import advertised_endpoints
from .security import authorizer
from .security.scram_credentials import CREDENTIALS_FILE, ScramCredentials
from .security.tls_reload import ListenerContexts
from .share import ShareGroups
from .supervisor import Supervisor, in_steps
from .transaction import TransactionCoordinator
from .transaction.producer_ids import PRODUCER_ID_FILE, ProducerIdManager

log = logging.getLogger("moldau.broker")

class Broker:
    def __init__(self, config: BrokerConfig, budget: Budget | None = None):
        self.config = config
        self.budget = budget  # the open-file split (None: not planned, as in tools)
        self.supervisor = Supervisor(faults.task_failer(config.log_dir))  # every long-lived task runs under it
        self.quotas = ClientQuotas(config.log_dir, config["quota.window.num"], config["quota.window.size.seconds"])
        self.node_id: int = config["node.id"]
        self.advertised = advertised_endpoints(config)  # listener name -> (host, port) clients are given
        self.host, self.port = config.advertised()
        self.logs = LogManager(config.log_dir, broker_log_config(config), node_id=self.node_id)
        self.producer_ids = ProducerIdManager(config.log_dir / PRODUCER_ID_FILE)
        self.cleaner = LogCleaner(self.logs, config["log.cleaner.io.max.bytes.per.second"],
                                  config["log.cleaner.dedupe.buffer.size"] // DEDUPE_BYTES_PER_KEY)
        self.replicas = ReplicaManager(self)
        self.group_configs = GroupConfigs(config)
        self.store = self.replicas.store = _metadata_store(self)
        self.groups = GroupCoordinator(self.logs, self.replicas, config, self.notify_append, self.supervisor,
                                       self.group_configs)
        self.share = ShareGroups(self)
        self.transactions = TransactionCoordinator(
            self.logs, self.replicas, config, self.producer_ids, self.partition_leader, self.notify_append,
            self.supervisor
        )
        self.kill_after_marker = faults.marker_killer()
        self.fail_marker = faults.marker_failer()
        self.slow_disk = faults.slow_disk(config.log_dir)
        self.scram_credentials = ScramCredentials(config.log_dir / CREDENTIALS_FILE)
        self.authorizer = authorizer.from_config(config)
        self.tls_contexts = ListenerContexts(self)
        self.broker_configs = DynamicBrokerConfigs(self)
        self.connection_quotas = None  # server.py's ConnectionQuotas while serving
        self.fetch_purgatory = FetchPurgatory()
        self.metrics = None  # a BrokerMetrics while metrics.port serves Prometheus
        self.txn_verifier = None  # a TransactionVerifier while serving: KIP-890's question to other brokers
        self.fetch_sessions = FetchSessionCache(config["max.incremental.fetch.session.cache.slots"])
        self.idle_answers = IdleAnswers()  # sessionless fetches' answers for partitions with nothing new
        self.metadata_answers = MetadataAnswers()  # encoded Metadata answers (handlers/metadata.py)

    @property
    def cluster_id(self) -> str:
        return self.logs.cluster_id

    def start(self) -> None:
        for repair in self.logs.load():
            log.warning("recovery: %s", repair)
        log.info("loaded %d topics from %s", len(self.logs.topics), self.config.log_dir)

    async def open(self) -> None:
        """Join the cluster (a standalone broker has nothing to join). The coordinators' state of the
        internal topics' partitions it leads loads in the background, as in Kafka: the broker listens
        meanwhile and answers their keys COORDINATOR_LOAD_IN_PROGRESS until each partition is loaded."""
        await self.store.start()

    def leadership_changed(self, topic: str, partition: int, leader: bool, epoch: int) -> None:
        """A coordinator takes over the keys of an internal topic's partition this broker now leads
        (Kafka's onElection) and gives up those of one it no longer leads (onResignation)."""
        coordinator = {OFFSETS_TOPIC: self.groups, TRANSACTION_STATE_TOPIC: self.transactions,
                       SHARE_STATE_TOPIC: self.share.persister}.get(topic)
        if coordinator is None:
            return
        if leader:
            coordinator.on_election(partition, epoch)
        else:
            coordinator.on_resignation(partition)

    async def close(self) -> None:
        """Leave the cluster: leadership handed over, session ended (controlled shutdown)."""
        if self.replicas.fetchers is not None:
            self.replicas.fetchers.shutdown()
        await self.store.stop(controlled=True)

    def shutdown(self) -> None:
        self.transactions.log_summary()
        for failure in self.logs.close():
            log.error("shutdown: could not close %s; the next start will recover", failure)

    def remove_expired_producers(self, now: int) -> None:
        """Drop every partition's state of producers idle for producer.id.expiration.ms."""
        expiration = self.config["producer.id.expiration.ms"]
        removed = sum(log_.producer_state.remove_expired(now, expiration) for log_ in self.logs.logs.values())
        if removed:
            log.info("expired the state of %d idle producer(s)", removed)

    def delete_old_segments(self, now: int) -> None:
        """Retention and DeleteRecords: drop old segments; their files go after file.delete.delay.ms."""
        for log_, files in self.logs.delete_old_segments(now):
            log.info("deleted %d segment(s) of %s; its log start offset is now %d",
                     sum(f.name.endswith(".log.deleted") for f in files), log_.name, log_.log_start_offset)
            clock.call_later(log_.config.file_delete_delay_ms / 1000, _remove_files, files)

    # ---- topics -------------------------------------------------------------

    def topic_for_write(self, name: str, allow_auto_create: bool = True) -> TopicMetadata | None:
        """The topic, auto-created when the config and the request allow it.

        Raises InvalidTopic for a name Kafka would refuse."""
        topic = self.logs.topic(name)
        if topic is None and self.may_auto_create(name, allow_auto_create):
            validate_topic_name(name)
            try:
                topic = self.store.auto_create(name, self.config["num.partitions"])
            except TopicExists:  # a CreateTopics or Metadata request is making it right now
                return None
            if topic is not None:
                log.info("auto-created topic %s with %d partitions", name, topic.num_partitions)
        return topic

    def endpoint(self, header) -> tuple[str, int]:
        """Where clients reach this broker: the advertised address of the listener the request came in on."""
        if header.session is None:  # the broker's own request
            return self.host, self.port
        return self.advertised[header.session.listener.name]

    def advertise(self) -> None:
        """advertised.listeners changed at run time: clients are given the new endpoints from now on, and
        a cluster's registration names them."""
        self.advertised = advertised_endpoints(self.config)
        self.host, self.port = self.config.advertised()
        self.store.advertised_changed()

    def may_auto_create(self, name: str, allowed_by_request: bool) -> bool:
        return allowed_by_request and self.config["auto.create.topics.enable"] and name not in INTERNAL_TOPICS

    async def auto_create(self, name: str) -> TopicMetadata | None:
        """Metadata's auto-creation, in steps like CreateTopics; None if another request is creating it."""
        try:
            topic = await self.store.create_topic(name, self.store.plan_replicas(self.config["num.partitions"], -1, None),
                                                  {})
        except TopicExists:
            return None
        log.info("auto-created topic %s with %d partitions", name, topic.num_partitions)
        return topic

    async def create_topic_locally(self, name: str, partitions: int, configs: dict | None = None,
                                   topic_id=None) -> TopicMetadata:
        """Create a topic's logs a few partitions at a time, serving other connections in between."""
        await in_steps(self.logs.create_topic_steps(name, partitions, configs, topic_id))
        return self.logs.topic(name)

    def partition_leader(self, topic: str, partition: int) -> int | None:
        """The node leading the partition (-1 while it has none); None if there is no such partition."""
        state = self.store.cache.partition_state(topic, partition)
        return None if state is None else state.leader

    def in_sync_replicas(self, topic: str, partition: int) -> list[int]:
        """The partition's ISR, which min.insync.replicas is measured against."""
        state = self.store.cache.partition_state(topic, partition)
        return [] if state is None else list(state.isr)

    def brokers(self, header) -> list[dict]:
        """Metadata's live brokers, each at its endpoint for the listener the request came in on."""
        own = self.endpoint(header)
        listener = header.session.listener.name if header.session is not None else None
        found = []
        for b in self.store.cache.live_brokers():
            host, port = own if b.node_id == self.node_id else b.endpoint(listener)
            found.append({"node_id": b.node_id, "host": host, "port": port, "rack": b.rack})
        return found

    def partition_metadata(self, topic: TopicMetadata) -> list[dict]:
        """Metadata partition entries: leader, epoch, replicas, ISR, offline replicas."""
        live = self.store.cache.brokers
        entries = []
        for p in range(topic.num_partitions):
            state = self.store.cache.partition_state(topic.name, p)
            if state is None:
                entries.append({"error_code": ErrorCode.LEADER_NOT_AVAILABLE, "partition_index": p, "leader_id": -1,
                                "leader_epoch": -1, "replica_nodes": [], "isr_nodes": [], "offline_replicas": []})
                continue
            entries.append({
                "error_code": ErrorCode.LEADER_NOT_AVAILABLE if state.leader == NO_LEADER else 0,
                "partition_index": p,
                "leader_id": state.leader,
                "leader_epoch": state.leader_epoch,
                "replica_nodes": list(state.replicas),
                "isr_nodes": list(state.isr),
                "offline_replicas": [r for r in state.replicas if r not in live],
                "eligible_leader_replicas": [],
                "last_known_elr": [],
            })
        return entries

    # ---- fetch long-poll ------------------------------------------------------

    def notify_append(self, topic: str, partition: int) -> None:
        self.replicas.on_append(topic, partition)
        log_ = self.logs.log(topic, partition)
        if log_ is not None:
            stages.mark("appended", topic, partition, log_.log_end_offset)
            self.fetch_purgatory.check_and_complete(log_)
        self.share.partitions.notify_append(topic, partition)


def _remove_files(files) -> None:
    for path in files:
        try:
            path.unlink(missing_ok=True)
        except OSError as exc:  # the next start removes what is left
            log.warning("could not remove %s: %s", path, exc)


def _metadata_store(broker: Broker) -> MetadataStore:
    """etcd.connect makes the broker one of a cluster; the etcd client is imported only then."""
    if not broker.config["etcd.connect"]:
        return LocalMetadataStore(broker)
    from .cluster.etcd_store import EtcdMetadataStore

    return EtcdMetadataStore(broker)


