"""The metadata store / controller interface, and its standalone implementation.

Handlers never ask whether the broker is clustered: they create, grow and
delete topics through the store and read partition states from its cache.
``LocalMetadataStore`` is today's single broker -- it leads every partition
with an ISR of one. ``EtcdMetadataStore`` (etcd_store.py) keeps the same
state in etcd for a cluster.
"""

from __future__ import annotations

import logging
from typing import Callable

from broker.config.dynamic_configs import DEFAULT_ENTITY
from broker.coordinator.internal_topics import INTERNAL_TOPIC_SETTINGS
from broker.network.client_quotas import altered
from broker.supervisor import in_steps
from storage.catalog import TopicMetadata
from storage.errors import InvalidConfig, UnknownTopic

from .client_security import ClientSecurity
from .controller import requested_election
from .metadata import (
    BrokerInfo,
    InvalidReplicaAssignment,
    MetadataCache,
    PartitionState,
    assign_replicas,
    check_assignment,
)

log = logging.getLogger("moldau.metadata")


class NodeIdInUse(RuntimeError):
    """A live broker holds this broker's node.id: the broker stops with this line."""


class MetadataStore:
    """What both implementations share: replica assignment for new topics and partitions."""

    cache: MetadataCache
    client_security = ClientSecurity()  # a standalone broker connects to no other

    def __init__(self, broker) -> None:
        self.broker = broker

    def plan_replicas(self, num_partitions: int, replication_factor: int,
                      assignment: dict[int, list[int]] | None, first_partition: int = 0) -> dict[int, list[int]]:
        """The replicas of each new partition: the request's explicit assignment (checked), or spread
        over the live brokers. Raises InvalidReplicationFactor or InvalidReplicaAssignment."""
        live = [b.node_id for b in self.cache.live_brokers()]
        if assignment:
            check_assignment(assignment, set(live), first_partition)
            return assignment
        if replication_factor == -1:
            replication_factor = self.broker.config["default.replication.factor"]
        return assign_replicas(live, num_partitions, replication_factor, first_partition)

    def internal_replication_factor(self, configured: int) -> int:
        """offsets/transaction.state.log replication factor, capped at the live brokers (with a warning)."""
        live = len(self.cache.live_brokers())
        if live < configured:
            log.warning("only %d live broker(s): creating an internal topic with replication factor %d, not %d",
                        live, live, configured)
        return max(1, min(live, configured))

    async def elect_leader(self, topic: str, index: int, election_type: int) -> tuple[str, str | None]:
        """ElectLeaders for one partition: ("", None) when elected, else (error name, message)."""
        state = self.cache.partition_state(topic, index)
        if state is None:
            return "UNKNOWN_TOPIC_OR_PARTITION", None
        new, error = requested_election(state, set(self.cache.brokers), election_type)
        if new is None:
            return error, None
        if not await self.alter_partition(topic, index, state, new):
            return "ELIGIBLE_LEADERS_NOT_AVAILABLE", "the partition changed meanwhile; try again"
        log.info("%s-%d: leader %d -> %d by ElectLeaders at epoch %d", topic, index, state.leader, new.leader,
                 new.leader_epoch)
        return "", None

    async def reassign(self, topic: str, index: int, target: list[int] | None) -> tuple[str, str | None]:
        """AlterPartitionReassignments for one partition: ("", None) or (error name, message)."""
        state = self.cache.partition_state(topic, index)
        if state is None:
            return "UNKNOWN_TOPIC_OR_PARTITION", None
        if target is None:
            if not (state.adding or state.removing):
                return "NO_REASSIGNMENT_IN_PROGRESS", None
            new = state.reassignment_cancelled()
        else:
            try:
                check_assignment({0: target}, {b.node_id for b in self.cache.live_brokers()})
            except InvalidReplicaAssignment as exc:
                return "INVALID_REPLICA_ASSIGNMENT", str(exc)
            if state.adding or state.removing:
                return "REASSIGNMENT_IN_PROGRESS", "cancel the one under way first"
            if list(target) == list(state.replicas):
                return "", None
            new = state.reassigned(target)
        if not await self.alter_partition(topic, index, state, new):
            return "REASSIGNMENT_IN_PROGRESS", "the partition changed meanwhile; try again"
        log.info("%s-%d: reassignment of %s to %s %s", topic, index, list(state.replicas), target,
                 "cancelled" if target is None else "started")
        return "", None

    # the topics as the cluster has them: what clients are told exists (a broker may still be making the logs
    # of some: their partitions answer NOT_LEADER_OR_FOLLOWER until it has, never UNKNOWN_TOPIC_OR_PARTITION)
    def topic(self, name: str) -> TopicMetadata | None:
        return self.topics.get(name)

    def topic_by_id(self, topic_id) -> TopicMetadata | None: ...

    # implemented by each store
    async def alter_topic_configs(self, name: str, change: Callable[[dict[str, str]], dict[str, str]],
                                  validate_only: bool) -> dict[str, str]:
        """Replace a topic's configs with ``change(its current configs)`` (which raises InvalidConfig to
        refuse), before the answer; UnknownTopic when there is no such topic. Returns the new configs."""

    async def alter_client_quotas(self, changes: list[tuple[tuple, list[dict]]]) -> None:
        """AlterClientQuotas' checked (entity, operations) pairs, stored before the answer (OSError if not)."""

    async def alter_broker_configs(self, entity: str, change: Callable[[dict[str, str]], dict[str, str]],
                                   validate_only: bool) -> None:
        """Replace the dynamic broker configs of ``entity`` (a node id or ``<default>``) with ``change(its
        current ones)`` (which raises InvalidConfig to refuse), before the answer."""

    async def alter_group_configs(self, group_id: str, change: Callable[[dict[str, str]], dict[str, str]],
                                  validate_only: bool) -> None:
        """Replace a group's configs (GROUP resource) with ``change(its current ones)`` (which raises
        InvalidConfig to refuse), before the answer."""

    def configs_changed(self) -> None:
        """Topic configs or their defaults changed (the controller of a cluster looks again)."""

    def advertised_changed(self) -> None:
        """This broker's advertised.listeners changed (broker.advertise)."""

    def peer_connection_failed(self, node_id: int, exc: BaseException) -> None:
        """A connection to broker ``node_id`` failed with ``exc`` (a cluster may fence a crashed broker now)."""

    async def start(self) -> None: ...
    async def stop(self, controlled: bool) -> None: ...
    def topic_creation_pending(self, name: str) -> bool:
        return False


class LocalMetadataStore(MetadataStore):
    """A standalone broker: the catalog on disk is the metadata, this broker leads everything at epoch 0."""

    def __init__(self, broker) -> None:
        super().__init__(broker)
        self.cache = _LocalCache(broker)

    @property
    def topics(self):
        return self.broker.logs.topics

    def topic_by_id(self, topic_id) -> TopicMetadata | None:
        return self.broker.logs.topic_by_id(topic_id)

    async def start(self) -> None:
        """The internal topics exist from the start, and this broker leads (and coordinates) all of them."""
        self.broker.broker_configs.load()
        self.broker.group_configs.load()
        self.broker.groups.manager.open_topic()
        self.broker.transactions.state_manager.open_topic()
        for name in INTERNAL_TOPIC_SETTINGS:
            topic = self.broker.logs.topic(name)
            for p in range(topic.num_partitions if topic is not None else 0):  # (one made on first need: later)
                self.broker.leadership_changed(name, p, True, 0)

    async def create_topic(self, name: str, assignment: dict[int, list[int]], configs: dict[str, str]) -> TopicMetadata:
        return await self.broker.create_topic_locally(name, len(assignment), configs)

    def auto_create(self, name: str, num_partitions: int) -> TopicMetadata | None:
        return self.broker.logs.create_topic(name, num_partitions)

    async def create_partitions(self, name: str, assignment: dict[int, list[int]]) -> None:
        topic = self.broker.logs.topic(name)
        await in_steps(self.broker.logs.add_partitions_steps(name, topic.num_partitions + len(assignment)))

    async def delete_topic(self, name: str) -> None:
        await in_steps(self.broker.logs.delete_topic_steps(name))

    async def ensure_internal_topic(self, name: str) -> bool:
        return self.broker.logs.topic(name) is not None

    async def alter_topic_configs(self, name: str, change, validate_only: bool) -> dict[str, str]:
        topic = self.broker.logs.topic(name)
        if topic is None:
            raise UnknownTopic(f"unknown topic {name!r}")
        wanted = change(dict(topic.configs))
        if not validate_only:
            self.broker.logs.alter_topic_configs(name, wanted)
        return wanted

    async def alter_client_quotas(self, changes) -> None:
        """Kept in the data directory (client-quotas.json); the values apply until a restart even when they
        could not be stored."""
        quotas = self.broker.quotas
        for entity, ops in changes:
            quotas.set(entity, altered(entity, ops, quotas.values.get(entity, {})))
        quotas.save()

    def advertised_changed(self) -> None:
        broker = self.broker
        self.cache.brokers = {broker.node_id: BrokerInfo(broker.node_id, broker.host, broker.port)}

    async def alter_broker_configs(self, entity: str, change, validate_only: bool) -> None:
        """Kept in the data directory (broker-configs.json)."""
        configs = self.broker.broker_configs
        if entity not in (configs.own, DEFAULT_ENTITY):
            raise InvalidConfig(f"there is no broker {entity} (this broker is {configs.own})")
        wanted = change(dict(configs.entities.get(entity, {})))
        if not validate_only:
            configs.set(entity, wanted)
            configs.save()

    async def alter_group_configs(self, group_id: str, change, validate_only: bool) -> None:
        """Kept in the data directory (group-configs.json)."""
        configs = self.broker.group_configs
        wanted = change(dict(configs.groups.get(group_id, {})))
        if not validate_only:
            configs.set(group_id, wanted)
            configs.save()


class _LocalCache(MetadataCache):
    def __init__(self, broker) -> None:
        super().__init__()
        self.broker = broker
        self.controller_id = broker.node_id
        self.brokers = {broker.node_id: BrokerInfo(broker.node_id, broker.host, broker.port)}
        me = (broker.node_id,)
        # every partition's state alone (frozen, so shared: a fetch asks it of each partition it reads)
        self._alone = PartitionState(broker.node_id, 0, me, me)

    def partition_state(self, topic: str, partition: int) -> PartitionState | None:
        return self._alone if self.broker.logs.log(topic, partition) is not None else None
