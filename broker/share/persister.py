"""The durable share-partition state, in the internal topic __share_group_state (Kafka's share coordinator).

A share partition (group, topic id, partition) lives in partition
abs(hash("group:topicId:partition")) % share.coordinator.state.topic.num.partitions,
Kafka's rule. The leader of that partition is the key's **share coordinator**: it
replays the partition when elected (OwnedPartitions, as the group coordinator does)
and appends each write as one ShareSnapshot record in Kafka's format -- key type 0
(ShareSnapshotKey), value version 0 (ShareSnapshotValue: leader epoch, start offset,
the window's state batches) -- through the same acks=all append as a Produce; a
write is answered once committed. A null value deletes the key (DeleteGroups).

The **share-partition leader** (the topic partition's leader) reads and writes
through ``read``/``write``: locally when it is also the key's share coordinator
(always, standalone), else with ReadShareGroupState / WriteShareGroupState to the
coordinator over the inter-broker channel (DeleteShareGroupState for a deletion). A write carries the leader epoch of the
topic partition it comes from: one from an older leadership than the last one
written is FENCED_LEADER_EPOCH, so a deposed leader cannot overwrite its successor.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import NamedTuple

from broker.coordinator import partitions as coordinator_partitions
from broker.coordinator.internal_topics import SHARE_STATE_TOPIC, open_internal_topic, partition_for
from broker.coordinator.partitions import OwnedPartitions
from broker.coordinator.record_fields import I16, RecordFormatError
from broker.errors import ErrorCode
from protocol import codec
from protocol.errors import CorruptRecord
from protocol.records import BatchHeader, build_batch, iter_records
from storage import clock

SNAPSHOT_KEY = 0  # the record type Kafka's share coordinator gives a ShareSnapshot
READ_VERSION = WRITE_VERSION = DELETE_VERSION = INITIALIZE_VERSION = 0
SUMMARY_VERSION = 1
DONE_STATES = (2, 4)  # ACKNOWLEDGED, ARCHIVED in a snapshot's state batches
RETRY_S = 0.1
# a coordinator that moves or loads is asked again for this share of request.timeout.ms, so that the client's
# request (under the same timeout) is answered -- with the error, which it retries -- before it gives up
RETRY_SHARE = 3
RETRIABLE = {ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.COORDINATOR_NOT_AVAILABLE}

log = logging.getLogger("moldau.share")


class ShareKey(NamedTuple):
    group_id: str
    topic_id: uuid.UUID
    partition: int

    def coordinator_key(self) -> str:
        return f"{self.group_id}:{self.topic_id}:{self.partition}"


class Snapshot(NamedTuple):
    start_offset: int  # -1: initialized without a start (the leader starts at share.auto.offset.reset)
    state_batches: list[dict]
    state_epoch: int = 0
    leader_epoch: int = -1

    def delivery_complete_count(self) -> int:
        """Offsets of the window acknowledged or archived (KIP-1226); -1 without a start."""
        if self.start_offset < 0:
            return -1
        return sum(b["last_offset"] - max(b["first_offset"], self.start_offset) + 1 for b in self.state_batches
                   if b["delivery_state"] in DONE_STATES and b["last_offset"] >= self.start_offset)


class Summary(NamedTuple):
    """What ReadShareGroupStateSummary tells of a share partition."""
    start_offset: int
    state_epoch: int
    leader_epoch: int
    delivery_complete_count: int


def encode_key(key: ShareKey) -> bytes:
    return I16.pack(SNAPSHOT_KEY) + codec.encode_bytes(
        "ShareSnapshotKey", 0, {"group_id": key.group_id, "topic_id": key.topic_id, "partition": key.partition})


def encode_value(snapshot: Snapshot, snapshot_epoch: int) -> bytes:
    return I16.pack(0) + codec.encode_bytes("ShareSnapshotValue", 0, {
        "snapshot_epoch": snapshot_epoch, "state_epoch": snapshot.state_epoch, "leader_epoch": snapshot.leader_epoch,
        "start_offset": snapshot.start_offset, "state_batches": snapshot.state_batches})


def decode(key: bytes, value: bytes | None) -> tuple[ShareKey, Snapshot | None] | None:
    """A record of the state topic, or None for a record type this broker does not keep (ShareUpdate)."""
    try:
        if I16.unpack_from(key)[0] != SNAPSHOT_KEY:
            return None
        k = codec.decode("ShareSnapshotKey", 0, key, 2)[0]
        share_key = ShareKey(k["group_id"], k["topic_id"], k["partition"])
        if value is None:
            return share_key, None
        v = codec.decode("ShareSnapshotValue", 0, value, 2)[0]
    except (codec.DecodeError, ValueError, IndexError) as exc:
        raise RecordFormatError(str(exc)) from exc
    return share_key, Snapshot(v["start_offset"], v["state_batches"], v["state_epoch"], v["leader_epoch"])


class SharePersister:
    def __init__(self, broker) -> None:
        self.broker = broker
        self.logs, self.replicas, self.config = broker.logs, broker.replicas, broker.config
        self.num_partitions = self.config["share.coordinator.state.topic.num.partitions"]
        self.owned = OwnedPartitions(SHARE_STATE_TOPIC, broker.supervisor)
        self.snapshots: dict[ShareKey, Snapshot] = {}  # the keys of the partitions coordinated here
        self._epochs: dict[ShareKey, int] = {}
        self.channel = None  # the InterBrokerChannel to the other share coordinators, set as the broker serves

    def partition_for(self, key: ShareKey) -> int:
        return partition_for(key.coordinator_key(), self.num_partitions)

    # ---- the share coordinator's side --------------------------------------------------

    async def ready(self) -> bool:
        """The state topic exists (made on first need, as Kafka does); its partitions are being loaded."""
        if self.logs.topic(SHARE_STATE_TOPIC) is None:
            if self.config["etcd.connect"]:
                if not await self.broker.store.ensure_internal_topic(SHARE_STATE_TOPIC):
                    return False
            else:  # standalone: this broker leads every partition of it
                topic = open_internal_topic(self.logs, SHARE_STATE_TOPIC, self.num_partitions,
                                            self.config["offsets.topic.segment.bytes"], self.config)
                for p in range(topic.num_partitions):
                    self.broker.leadership_changed(SHARE_STATE_TOPIC, p, True, 0)
        self.num_partitions = self.logs.topic(SHARE_STATE_TOPIC).num_partitions
        return True

    async def loaded(self) -> None:
        """Once the partitions this broker coordinates are loaded (the admin's and DeleteGroups' view); at once
        while there is no state topic (no share group ever wrote state: nothing to load, nothing made)."""
        if self.logs.topic(SHARE_STATE_TOPIC) is not None:
            await self.owned.loaded()

    def on_election(self, partition: int, epoch: int) -> None:
        self.num_partitions = self.logs.topic(SHARE_STATE_TOPIC).num_partitions
        self.owned.elect(partition, epoch, self._load)

    def on_resignation(self, partition: int) -> None:
        if self.owned.resign(partition):
            for key in [k for k in self.snapshots if self.partition_for(k) == partition]:
                del self.snapshots[key]

    async def _load(self, partition: int) -> None:
        log_ = self.logs.log(SHARE_STATE_TOPIC, partition)
        found: dict[ShareKey, Snapshot] = {}

        def feed(hdr: BatchHeader, data: bytes) -> None:
            if hdr.is_control:
                return
            try:
                for record in iter_records(data):
                    decoded = decode(record.key, record.value) if record.key is not None else None
                    if decoded is None:
                        continue
                    key, snapshot = decoded
                    if snapshot is None:
                        found.pop(key, None)
                    else:
                        found[key] = snapshot
            except (CorruptRecord, RecordFormatError) as exc:
                log.warning("%s-%d: skipped an unreadable batch at offset %d (%s)", SHARE_STATE_TOPIC, partition,
                            hdr.base_offset, exc)

        await coordinator_partitions.replay(log_, feed)
        self.snapshots.update(found)
        if found:
            log.info("loaded the share state of %d share partitions from %s-%d", len(found), SHARE_STATE_TOPIC,
                     partition)

    def read_local(self, key: ShareKey) -> tuple[ErrorCode, Snapshot | None]:
        error = self.owned.error(self.partition_for(key))
        return (error, None) if error else (ErrorCode.NONE, self.snapshots.get(key))

    def write_local(self, key: ShareKey, snapshot: Snapshot | None) -> coordinator_partitions.Pending:
        """Append the key's snapshot (None: its deletion) as its share coordinator; NONE once committed. A write
        from an older leadership of the topic partition, or of an older state epoch, is fenced."""
        if error := self.owned.error(self.partition_for(key)):
            return error
        known = self.snapshots.get(key)
        if snapshot is None and known is None:
            return ErrorCode.NONE  # nothing to delete
        if snapshot is not None and known is not None:
            if 0 <= snapshot.leader_epoch < known.leader_epoch:
                return ErrorCode.FENCED_LEADER_EPOCH
            if snapshot.state_epoch < known.state_epoch:
                return ErrorCode.FENCED_STATE_EPOCH
        return self._append(key, snapshot)

    def initialize_local(self, key: ShareKey, state_epoch: int, start_offset: int) -> coordinator_partitions.Pending:
        """InitializeShareGroupState of one share partition (Kafka's checks and order): its state starts anew at
        ``start_offset`` (-1: the leader's share.auto.offset.reset) with no window, at ``state_epoch``."""
        if error := self.owned.error(self.partition_for(key)):
            return error
        if key.partition < 0 or state_epoch < -1:
            return ErrorCode.INVALID_REQUEST
        known = self.snapshots.get(key)
        if known is not None and state_epoch != -1 and known.state_epoch > state_epoch:
            return ErrorCode.FENCED_STATE_EPOCH
        topic = self.logs.topic_by_id(key.topic_id)
        if topic is None or key.partition >= topic.num_partitions:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        if known is not None and (known.state_epoch, known.start_offset, known.state_batches) == (
                state_epoch, start_offset, []):
            return ErrorCode.NONE  # (a retry)
        return self._append(key, Snapshot(start_offset, [], state_epoch, 0))

    def _append(self, key: ShareKey, snapshot: Snapshot | None) -> coordinator_partitions.Pending:
        partition = self.partition_for(key)
        epoch = self._epochs[key] = self._epochs.get(key, 0) + 1
        value = None if snapshot is None else encode_value(snapshot, epoch)
        buf = bytearray(build_batch([(encode_key(key), value)]))
        error, _ = coordinator_partitions.append(self.replicas, SHARE_STATE_TOPIC, partition, buf,
                                                 clock.wall_ms(), -1)
        if error != ErrorCode.NONE:
            log.warning("share state of %s not written: %s", key.coordinator_key(), error.name)
            return coordinator_partitions.client_error(error)
        self.broker.notify_append(SHARE_STATE_TOPIC, partition)
        if snapshot is None:
            self.snapshots.pop(key, None)
        else:
            self.snapshots[key] = snapshot
        return coordinator_partitions.committed(self.replicas, SHARE_STATE_TOPIC, partition,
                                                self.config["offsets.commit.timeout.ms"])

    # ---- the share-partition leader's side -------------------------------------------------

    async def read(self, key: ShareKey) -> tuple[ErrorCode, Snapshot | None]:
        """The key's durable state (None: none yet), from its share coordinator wherever it is."""
        return await self._ask(key, lambda: self.read_local(key), lambda node: self._read_remote(node, key))

    async def write(self, key: ShareKey, snapshot: Snapshot | None) -> ErrorCode:
        """Write the key's state at its share coordinator; NONE once it is committed there."""

        async def local():
            return await coordinator_partitions.settled(self.write_local(key, snapshot)), None

        return (await self._ask(key, local, lambda node: self._write_remote(node, key, snapshot)))[0]

    async def initialize(self, key: ShareKey, state_epoch: int, start_offset: int) -> ErrorCode:
        """InitializeShareGroupState at the key's share coordinator, wherever it is; NONE once committed there."""

        async def local():
            return await coordinator_partitions.settled(self.initialize_local(key, state_epoch, start_offset)), None

        async def remote(node: int):
            response = await self.channel.send(node, "InitializeShareGroupState", INITIALIZE_VERSION, {
                "group_id": key.group_id, "topics": [{"topic_id": key.topic_id, "partitions": [
                    {"partition": key.partition, "state_epoch": state_epoch, "start_offset": start_offset}]}]})
            return ErrorCode(response["results"][0]["partitions"][0]["error_code"]), None

        return (await self._ask(key, local, remote))[0]

    def summary_local(self, key: ShareKey) -> tuple[ErrorCode, Summary | None]:
        error, found = self.read_local(key)
        if found is None:
            return error, None
        return error, Summary(found.start_offset, found.state_epoch, found.leader_epoch,
                              found.delivery_complete_count())

    async def read_summaries(self, group_id: str, keys: list[ShareKey]) -> dict[ShareKey, Summary]:
        """The summaries of those of ``keys`` (all of ``group_id``) that have state, asked of each share
        coordinator at once with ReadShareGroupStateSummary (the group coordinator's admin view). A coordinator
        that cannot answer now leaves its keys out."""
        if not await self.ready():
            return {}
        by_node: dict[int, list[ShareKey]] = {}
        for key in keys:
            leader = self.broker.partition_leader(SHARE_STATE_TOPIC, self.partition_for(key))
            if leader is not None and leader >= 0:
                by_node.setdefault(leader, []).append(key)
        found = {}
        for node, node_keys in by_node.items():
            if node == self.broker.node_id:
                found.update((k, s) for k, s in ((k, self.summary_local(k)[1]) for k in node_keys) if s is not None)
                continue
            by_topic: dict[uuid.UUID, list[dict]] = {}
            for key in node_keys:
                by_topic.setdefault(key.topic_id, []).append({"partition": key.partition, "leader_epoch": -1})
            try:
                response = await self.channel.send(node, "ReadShareGroupStateSummary", SUMMARY_VERSION, {
                    "group_id": group_id, "topics": [{"topic_id": t, "partitions": ps} for t, ps in by_topic.items()]})
            except (OSError, asyncio.TimeoutError) as exc:
                log.warning("share coordinator %d unreachable for group %s: %s", node, group_id, exc)
                continue
            for result in response["results"]:
                for p in result["partitions"]:
                    if not p["error_code"] and p["state_epoch"] >= 0:
                        found[ShareKey(group_id, result["topic_id"], p["partition"])] = Summary(
                            p["start_offset"], p["state_epoch"], p["leader_epoch"], p["delivery_complete_count"])
        return found

    async def _ask(self, key: ShareKey, local, remote) -> tuple[ErrorCode, Snapshot | None]:
        deadline = clock.monotonic() + self.config["request.timeout.ms"] / 1000 / RETRY_SHARE
        while True:
            if not await self.ready():
                error, found = ErrorCode.COORDINATOR_NOT_AVAILABLE, None
            else:
                leader = self.broker.partition_leader(SHARE_STATE_TOPIC, self.partition_for(key))
                if leader == self.broker.node_id:
                    answer = local()
                    error, found = await answer if asyncio.iscoroutine(answer) else answer
                elif leader is None or leader < 0:
                    error, found = ErrorCode.COORDINATOR_NOT_AVAILABLE, None
                else:
                    try:
                        error, found = await remote(leader)
                    except (OSError, asyncio.TimeoutError) as exc:
                        log.debug("share coordinator %d unreachable: %s", leader, exc)
                        error, found = ErrorCode.COORDINATOR_NOT_AVAILABLE, None
            if error not in RETRIABLE or clock.monotonic() >= deadline:
                return error, found
            await clock.sleep(RETRY_S)


    async def _read_remote(self, node: int, key: ShareKey) -> tuple[ErrorCode, Snapshot | None]:
        response = await self.channel.send(node, "ReadShareGroupState", READ_VERSION, {
            "group_id": key.group_id,
            "topics": [{"topic_id": key.topic_id, "partitions": [{"partition": key.partition, "leader_epoch": -1}]}]})
        p = response["results"][0]["partitions"][0]
        if p["error_code"]:
            return ErrorCode(p["error_code"]), None
        # (start -1: no state, or initialized without a start -- its state epoch counts either way)
        return ErrorCode.NONE, Snapshot(p["start_offset"], p["state_batches"], p["state_epoch"])

    async def _write_remote(self, node: int, key: ShareKey, snapshot: Snapshot | None) -> tuple[ErrorCode, None]:
        topics = [{"topic_id": key.topic_id, "partitions": [{"partition": key.partition}]}]
        if snapshot is None:
            response = await self.channel.send(node, "DeleteShareGroupState", DELETE_VERSION,
                                                   {"group_id": key.group_id, "topics": topics})
        else:
            topics[0]["partitions"][0].update(
                state_epoch=snapshot.state_epoch, leader_epoch=snapshot.leader_epoch,
                start_offset=snapshot.start_offset, state_batches=snapshot.state_batches)
            response = await self.channel.send(node, "WriteShareGroupState", WRITE_VERSION,
                                                   {"group_id": key.group_id, "topics": topics})
        return ErrorCode(response["results"][0]["partitions"][0]["error_code"]), None
