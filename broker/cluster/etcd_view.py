"""The broker's view of etcd: one revision read whole (resync), then the watch from the next one, and the
audit that compares the view with etcd. Every key applies through _apply, deletions included.
"""

from __future__ import annotations

import asyncio
import json
import logging

import aetcd
from aetcd import rpc
from aetcd import utils as etcd_utils

from broker.supervisor import in_steps
from storage import clock
from storage.catalog import TopicMetadata
from storage.files import decode_uuid
from storage.log_manager import CREATE_STEP

from .etcd_configs import CLIENT_QUOTAS, CONFIGS
from .etcd_security import ACLS, SCRAM
from .etcd_session import RETRY_S
from .etcd_topics import CREATING
from .metadata import NO_LEADER, BrokerInfo, PartitionState

log = logging.getLogger("moldau.etcd")

AUDIT_CONFIRM_S = 1.0  # a difference the audit finds counts once the next audit, this much later, finds it too


class EtcdView:
    """The view part of EtcdMetadataStore: resync, watch, audit, and applying keys to the MetadataCache."""

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
            except Exception as exc:  # noqa: BLE001 -- the etcd client raises gRPC, aetcd and OS errors alike; logged, tried again
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
            except Exception as exc:  # noqa: BLE001 -- etcd away: the watch's own recovery reads the view again
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
        try:
            while True:
                for steps in self._topic_steps(name):
                    await in_steps(steps)
                local, topic = self.broker.logs.topic(name), self.topics.get(name)
                if (local is None and topic is None) or (local is not None and topic is not None and local.topic_id
                                                         == topic.topic_id and local.num_partitions >= topic.num_partitions):
                    return
        except Exception as exc:  # noqa: BLE001 -- a full disk: the next change of the topic, or a restart, tries again
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
