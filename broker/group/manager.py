"""GroupMetadataManager: group state kept in the internal topic __consumer_offsets.

Every change a group coordinator must not forget -- a commit, a generation's
assignment, a deletion -- is appended as records to the group's partition of
__consumer_offsets through the same Log.append as Produce. On startup the
partitions are replayed with compacted-topic semantics: the latest value per
key wins and a tombstone removes it. Offsets written inside a transaction stay
pending until the partition's commit or abort marker for that producer.
"""

from __future__ import annotations

import logging
from typing import Callable, Iterable

from broker.coordinator import partitions as coordinator_partitions
from broker.coordinator.internal_topics import OFFSETS_TOPIC, open_internal_topic, partition_for
from broker.errors import ErrorCode
from broker.share import records as share_records
from protocol.errors import CorruptRecord
from protocol.records import (
    CONTROL_COMMIT,
    BatchHeader,
    Record,
    build_batch,
    iter_records,
    read_control_marker,
)
from storage import clock
from storage.log_manager import LogManager

from . import consumer_records, records
from .metadata import CommittedOffset, GroupMetadata, GroupState, TopicPartition

log = logging.getLogger("moldau.group")


class GroupMetadataManager:
    def __init__(self, logs: LogManager, replicas, config, notify_append: Callable[[str, int], None]):
        self.logs = logs
        self.replicas = replicas
        self.config = config
        self.notify_append = notify_append
        self.num_partitions = config["offsets.topic.num.partitions"]

    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.num_partitions)

    # ---- loading ----------------------------------------------------------------

    def open_topic(self) -> None:
        """Create __consumer_offsets here if missing (a standalone broker's start)."""
        open_internal_topic(self.logs, OFFSETS_TOPIC, self.num_partitions, self.config["offsets.topic.segment.bytes"],
                            self.config)

    async def load_partition(self, partition: int) -> dict[str, GroupMetadata]:
        """The groups of one partition, replayed from its log in steps (others are served meanwhile)."""
        self.num_partitions = self.logs.topic(OFFSETS_TOPIC).num_partitions
        log_ = self.logs.log(OFFSETS_TOPIC, partition)
        replay = PartitionReplay(log_.name)
        await coordinator_partitions.replay(log_, replay.feed)
        groups = replay.groups()
        # (one line per partition that holds anything: a standalone broker loads 50 at its start)
        log.log(logging.INFO if replay.records else logging.DEBUG,
                "loaded %d groups from %s (%d records)", len(groups), log_.name, replay.records)
        return groups

    # ---- writing ------------------------------------------------------------------

    def store_group(self, group: GroupMetadata, assignment: dict[str, bytes]) -> ErrorCode:
        """Persist the group's generation, protocol, leader and members with ``assignment``."""
        value = records.group_metadata_value(group, assignment)
        return self.store_records(group.group_id, [(records.group_metadata_key(group.group_id), value)])

    def store_records(self, group_id: str, batch: list[tuple[bytes, bytes | None]]) -> ErrorCode:
        """Append a group's records (a classic group's, or consumer_records) as one batch."""
        error, _ = self._append(group_id, batch)
        if error == ErrorCode.MESSAGE_TOO_LARGE:
            return ErrorCode.UNKNOWN_SERVER_ERROR
        return coordinator_partitions.client_error(error)

    @staticmethod
    def classic_group_tombstone(group_id: str) -> list[tuple[bytes, None]]:
        """An empty classic group turned into a consumer group: its classic record goes."""
        return [(records.group_metadata_key(group_id), None)]

    def store_offsets(self, group: GroupMetadata, offsets: dict[TopicPartition, CommittedOffset]
                      ) -> coordinator_partitions.Pending:
        """Append the commits as one batch; they become the group's committed offsets once the batch
        is committed (acks=all), and are dropped if it is not, so that OffsetFetch never answers
        an offset the next coordinator may lack."""
        error, stored = self._append_offsets(group.group_id, offsets)
        if not stored:
            return error
        group.prepare_offset_commit(stored)

        def complete(error: ErrorCode) -> ErrorCode:
            group.complete_offset_commit(stored, error == ErrorCode.NONE)
            return error

        return coordinator_partitions.then(self.committed(group.group_id), complete)

    def store_txn_offsets(self, group: GroupMetadata, producer_id: int, producer_epoch: int,
                          offsets: dict[TopicPartition, CommittedOffset]) -> ErrorCode:
        """Append the commits as one batch of the producer's transaction; they stay pending
        until its marker in this partition."""
        error, stored = self._append_offsets(group.group_id, offsets, (producer_id, producer_epoch))
        if stored:
            group.stage_txn_offsets(producer_id, stored)
        return error

    def _append_offsets(self, group_id: str, offsets: dict[TopicPartition, CommittedOffset],
                        producer: tuple[int, int] | None = None) -> tuple[ErrorCode, dict]:
        """(error, the commits as stored: empty unless the error is NONE)."""
        entries = list(offsets.items())
        batch = [
            (records.offset_commit_key(group_id, topic, partition), records.offset_commit_value(c))
            for (topic, partition), c in entries
        ]
        error, first_offset = self._append(group_id, batch, producer)
        if error == ErrorCode.MESSAGE_TOO_LARGE:
            return ErrorCode.INVALID_COMMIT_OFFSET_SIZE, {}
        if error != ErrorCode.NONE:
            return coordinator_partitions.client_error(error), {}
        return error, {tp: c._replace(record_offset=first_offset + i) for i, (tp, c) in enumerate(entries)}

    def remove(self, group: GroupMetadata, partitions: list[TopicPartition], group_tombstone: bool) -> ErrorCode:
        """Tombstones for the group's offsets of ``partitions`` (and for the group itself)."""
        batch = [(records.offset_commit_key(group.group_id, topic, p), None) for topic, p in partitions]
        if group_tombstone:
            batch.append((records.group_metadata_key(group.group_id), None))
            if group.consumer is not None:
                batch.extend(consumer_records.group_tombstones(group.group_id))
        if not batch:
            return ErrorCode.NONE
        error, _ = self._append(group.group_id, batch)
        if error == ErrorCode.NONE:
            for tp in partitions:
                group.offsets.pop(tp, None)
        return coordinator_partitions.client_error(error)

    def _append(self, group_id: str, batch_records: list[tuple[bytes, bytes | None]],
                producer: tuple[int, int] | None = None) -> tuple[ErrorCode, int]:
        """(error, offset of the first record) of appending one batch to the group's partition,
        a transactional batch of ``producer`` (id, epoch) if one is given."""
        partition = self.partition_for(group_id)
        if producer is None:
            buf = bytearray(build_batch(batch_records))
        else:
            buf = bytearray(build_batch(batch_records, producer_id=producer[0], producer_epoch=producer[1],
                                        base_sequence=0, transactional=True))
        if len(buf) > self.config["message.max.bytes"]:
            return ErrorCode.MESSAGE_TOO_LARGE, -1
        error, first = coordinator_partitions.append(
            self.replicas, OFFSETS_TOPIC, partition, buf, clock.wall_ms(), self.config["offsets.commit.required.acks"],
            from_coordinator=producer is not None)
        if error == ErrorCode.NONE:
            self.notify_append(OFFSETS_TOPIC, partition)
        return error, first

    def committed(self, group_id: str, error: ErrorCode = ErrorCode.NONE) -> coordinator_partitions.Pending:
        """``error``, or once what was written for the group is committed, why it is not
        (offsets.commit.required.acks -1: acks=all, up to offsets.commit.timeout.ms)."""
        if error != ErrorCode.NONE or self.config["offsets.commit.required.acks"] != -1:
            return error
        return coordinator_partitions.committed(self.replicas, OFFSETS_TOPIC, self.partition_for(group_id),
                                                self.config["offsets.commit.timeout.ms"])


class PartitionReplay:
    """The groups stored in one partition of __consumer_offsets, fed its batches in log order."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.records = 0  # replayed: bounded by the live keys once compacted
        self._groups: dict[str, GroupMetadata] = {}
        self._described: set[str] = set()  # groups whose latest group metadata record is a value, not a tombstone

    def _group(self, group_id: str) -> GroupMetadata:
        return self._groups.setdefault(group_id, GroupMetadata(group_id, 0))

    def feed(self, hdr: BatchHeader, data: bytes) -> None:
        self.records += hdr.records_count
        try:
            if hdr.is_control:
                committed = read_control_marker(data).type == CONTROL_COMMIT
                for g in self._groups.values():
                    g.complete_txn_offsets(hdr.producer_id, committed)
                return
            for record in iter_records(data):
                _replay_record(record, hdr, self._group, self._described)
        except (CorruptRecord, records.RecordFormatError) as exc:
            log.warning("%s: skipped unreadable batch at offset %d (%s)", self.name, hdr.base_offset, exc)

    def groups(self) -> dict[str, GroupMetadata]:
        return {gid: g for gid, g in self._groups.items()
                if gid in self._described or g.offsets or g.pending_txn_offsets or g.consumer is not None
                or g.share is not None}


def replay_partition(name: str, batches: Iterable[tuple[BatchHeader, bytes]]) -> dict[str, GroupMetadata]:
    """The groups stored in one partition of __consumer_offsets, from its batches in log order."""
    replay = PartitionReplay(name)
    for hdr, data in batches:
        replay.feed(hdr, data)
    return replay.groups()


def _replay_record(record: Record, hdr: BatchHeader, group: Callable[[str], GroupMetadata], described: set[str]) -> None:
    if record.key is not None and consumer_records.is_consumer_group_key(record.key):
        consumer_records.replay(record.key, record.value, group)
        return
    if record.key is not None and share_records.is_share_group_key(record.key):
        share_records.replay(record.key, record.value, group)
        return
    key = records.decode_key(record.key)
    if isinstance(key, records.OffsetCommitKey):
        g = group(key.group_id)
        tp = (key.topic, key.partition)
        value = None if record.value is None else records.decode_offset_commit_value(record.value, record.offset)
        if hdr.is_transactional:  # pending until the producer's marker in this partition
            if value is not None:
                g.stage_txn_offsets(hdr.producer_id, {tp: value})
        elif value is None:
            g.offsets.pop(tp, None)
        else:
            g.offsets[tp] = value
    elif isinstance(key, records.GroupMetadataKey):
        g = group(key.group_id)
        if record.value is None:
            described.discard(key.group_id)
            _restore(g, None)
        else:
            described.add(key.group_id)
            _restore(g, records.decode_group_metadata_value(record.value))

def _restore(group: GroupMetadata, stored: records.GroupRecord | None) -> None:
    """Set a group being loaded to its stored generation: Stable with its members, or Empty."""
    group.members.clear()
    group.static_members.clear()
    if stored is None:  # deleted: what is left are offsets committed since
        group.protocol_type, group.protocol_name, group.leader_id, group.generation_id = None, None, None, 0
        group.state = GroupState.EMPTY
        return
    group.protocol_type = stored.protocol_type
    group.generation_id = stored.generation_id
    group.protocol_name = stored.protocol_name
    group.leader_id = stored.leader_id
    if stored.state_timestamp >= 0:
        group.state_timestamp = stored.state_timestamp
    for member in stored.members:
        group.members[member.member_id] = member
        if member.is_static:
            group.static_members[member.group_instance_id] = member.member_id
    group.state = GroupState.STABLE if group.members else GroupState.EMPTY
    group.update_subscribed_topics()
