"""Writing topics to etcd: creates and growths in steps under a /creating/<name> claim, deletions, partition
state compare-and-swaps (the ISR), and the internal topics made on first need.
"""

from __future__ import annotations

import asyncio
import json
import logging

from aetcd import utils as etcd_utils

from broker.coordinator.internal_topics import INTERNAL_TOPIC_SETTINGS
from storage import clock
from storage.catalog import TopicMetadata
from storage.errors import TopicExists, UnknownTopic
from storage.files import encode_uuid, random_uuid

from .etcd_session import RETRY_S
from .metadata import PartitionState, TopicChangeInProgress

log = logging.getLogger("moldau.etcd")

# etcd's default --max-txn-ops: a transaction with more operations is refused
MAX_TXN_OPS = 128
CREATING = "creating"  # /creating/<name>: the claim of a topic write in several steps


class EtcdTopicWrites:
    """The topic-writing part of EtcdMetadataStore."""

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
                compare=[tx.mod(key) == expected.version for key, (_, _, expected, _) in zip(keys, chunk, strict=True)],
                success=[tx.put(key, new.encode()) for key, (_, _, _, new) in zip(keys, chunk, strict=True)] + [tx.get(keys[0])],
                failure=[])
            if not ok:
                if len(chunk) == 1:
                    written.append(False)
                else:
                    written += [(await self.alter_partitions([change]))[0] for change in chunk]
                continue
            revision = responses[-1][0][1].mod_revision
            for key, (_, _, _, new) in zip(keys, chunk, strict=True):
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
        deadline = clock.monotonic() + self.ttl
        while True:
            try:
                await self.client.transaction(compare=[tx.value(claim) == ours], success=[tx.delete(claim)],
                                              failure=[])
                return
            except Exception as exc:  # noqa: BLE001 -- the etcd client raises gRPC, aetcd and OS errors alike; logged, tried again
                if clock.monotonic() > deadline:
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
        except Exception as exc:  # noqa: BLE001 -- the etcd client raises gRPC, aetcd and OS errors alike; logged, tried again
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
