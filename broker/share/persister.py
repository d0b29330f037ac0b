"""The durable share-partition state, in the internal topic __share_group_state (Kafka's share coordinator).

A share partition (group, topic id, partition) lives in partition
abs(hash("group:topicId:partition")) % share.coordinator.state.topic.num.partitions,
Kafka's rule. Each write is one ShareSnapshot record in Kafka's format -- key
version 0 (ShareSnapshotKey), value version 0 (ShareSnapshotValue: start offset and
the window's state batches) -- appended through the same path as a Produce with
acks=all, so the latest snapshot per key is what a restart (or the next leader of
the state partition) replays; a null value is the key's deletion (DeleteGroups).
The topic is compacted: the live keys are what a replay reads.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from typing import NamedTuple

from broker import coordinator_partitions
from broker.errors import ErrorCode
from broker.internal_topics import open_internal_topic, partition_for
from broker.record_fields import I16, RecordFormatError
from protocol import codec
from protocol.records import BatchHeader, CorruptRecord, build_batch, iter_records

SHARE_STATE_TOPIC = "__share_group_state"
SNAPSHOT_KEY = 0  # the record type Kafka's share coordinator gives a ShareSnapshot

log = logging.getLogger("moldau.share")


class ShareKey(NamedTuple):
    group_id: str
    topic_id: uuid.UUID
    partition: int

    def coordinator_key(self) -> str:
        return f"{self.group_id}:{self.topic_id}:{self.partition}"


class Snapshot(NamedTuple):
    start_offset: int
    state_batches: list[dict]
    state_epoch: int = 0


def encode_key(key: ShareKey) -> bytes:
    return I16.pack(SNAPSHOT_KEY) + codec.encode_bytes(
        "ShareSnapshotKey", 0, {"group_id": key.group_id, "topic_id": key.topic_id, "partition": key.partition})


def encode_value(snapshot: Snapshot, snapshot_epoch: int) -> bytes:
    return I16.pack(0) + codec.encode_bytes("ShareSnapshotValue", 0, {
        "snapshot_epoch": snapshot_epoch, "state_epoch": snapshot.state_epoch, "leader_epoch": -1,
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
    return share_key, Snapshot(v["start_offset"], v["state_batches"], v["state_epoch"])


class SharePersister:
    def __init__(self, logs, replicas, config, notify_append) -> None:
        self.logs, self.replicas, self.config, self.notify_append = logs, replicas, config, notify_append
        self.num_partitions = config["share.coordinator.state.topic.num.partitions"]
        self.snapshots: dict[ShareKey, Snapshot] = {}
        self._epochs: dict[ShareKey, int] = {}
        self._loading: asyncio.Future | None = None

    def partition_for(self, key: ShareKey) -> int:
        return partition_for(key.coordinator_key(), self.num_partitions)

    async def loaded(self) -> None:
        """Replay the state topic once, at the first share request after a start."""
        if self._loading is None:
            self._loading = asyncio.ensure_future(self._load())
        await asyncio.shield(self._loading)

    async def _load(self) -> None:
        open_internal_topic(self.logs, SHARE_STATE_TOPIC, self.num_partitions,
                            self.config["offsets.topic.segment.bytes"], self.config)
        topic = self.logs.topic(SHARE_STATE_TOPIC)
        if topic is None:
            return
        self.num_partitions = topic.num_partitions
        for partition in range(topic.num_partitions):
            log_ = self.logs.log(SHARE_STATE_TOPIC, partition)
            if log_ is not None:
                await coordinator_partitions.replay(log_, self._feed)
        log.info("loaded the share state of %d share partitions", len(self.snapshots))

    def _feed(self, hdr: BatchHeader, data: bytes) -> None:
        if hdr.is_control:
            return
        try:
            for record in iter_records(data):
                found = decode(record.key, record.value) if record.key is not None else None
                if found is None:
                    continue
                key, snapshot = found
                if snapshot is None:
                    self.snapshots.pop(key, None)
                else:
                    self.snapshots[key] = snapshot
        except (CorruptRecord, RecordFormatError) as exc:
            log.warning("%s: skipped an unreadable batch at offset %d (%s)", SHARE_STATE_TOPIC, hdr.base_offset, exc)

    def groups(self) -> set[str]:
        return {key.group_id for key in self.snapshots}

    def of_group(self, group_id: str) -> dict[ShareKey, Snapshot]:
        return {k: s for k, s in self.snapshots.items() if k.group_id == group_id}

    def write(self, key: ShareKey, snapshot: Snapshot | None) -> coordinator_partitions.Pending:
        """Append the share partition's snapshot (None: its deletion); NONE once committed, else why not."""
        epoch = self._epochs[key] = self._epochs.get(key, 0) + 1
        value = None if snapshot is None else encode_value(snapshot, epoch)
        partition = self.partition_for(key)
        buf = bytearray(build_batch([(encode_key(key), value)]))
        error, _ = coordinator_partitions.append(self.replicas, SHARE_STATE_TOPIC, partition, buf,
                                                 _now_ms(), -1)
        if error != ErrorCode.NONE:
            log.warning("share state of %s not written: %s", key.coordinator_key(), error.name)
            return coordinator_partitions.client_error(error)
        self.notify_append(SHARE_STATE_TOPIC, partition)
        if snapshot is None:
            self.snapshots.pop(key, None)
        else:
            self.snapshots[key] = snapshot
        return coordinator_partitions.committed(self.replicas, SHARE_STATE_TOPIC, partition,
                                                self.config["offsets.commit.timeout.ms"])


def _now_ms() -> int:
    return int(time.time() * 1000)
