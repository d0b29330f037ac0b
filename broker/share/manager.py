"""SharePartitionManager: share sessions, and the share partitions this broker leads (Kafka's of the same name).

A share partition lives on its topic partition's leader, made at the first
ShareFetch that names it: from its snapshot in __share_group_state if there is one,
else at the log's end (share.auto.offset.reset's default, latest). Every
acknowledgement, release and lock expiry writes its new snapshot before it is
answered; acquisitions are not written (an acquired record is AVAILABLE in the
durable state, so a restart redelivers it).

A share session (group, member) holds the partitions its ShareFetches named:
epoch 0 opens it (a new one replaces the old, whose records are released), each
request then carries the next epoch, -1 closes it and releases what the member holds.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections import Counter
from dataclasses import dataclass, field

from broker.config.group_configs import parse_duration_ms
from broker.errors import ErrorCode
from protocol.records import scan_batches
from storage import clock
from storage.errors import OffsetOutOfRange

from .partition import AcknowledgeType, InvalidRecordState, SharePartition
from .persister import RETRIABLE, ShareKey, SharePersister, Snapshot

log = logging.getLogger("moldau.share")

INITIAL_EPOCH, FINAL_EPOCH = 0, -1
SWEEP_INTERVAL_S = 0.1


@dataclass
class ShareSession:
    epoch: int  # the epoch the next request must carry
    connection: object  # the client connection's Session: the share session ends with it (as in Kafka)
    partitions: dict[tuple[uuid.UUID, int], None] = field(default_factory=dict)  # in the order they were named


class SessionError(Exception):
    def __init__(self, error: ErrorCode):
        super().__init__(error.name)
        self.error = error


class SharePartitionManager:
    def __init__(self, broker, persister: SharePersister) -> None:
        self.broker = broker
        self.config = broker.config
        self.persister = persister
        self.partitions: dict[ShareKey, SharePartition] = {}
        self.sessions: dict[tuple[str, str], ShareSession] = {}
        # (topic id, partition) -> parked ShareFetches to wake when an append or a release may have records
        self._waiters: dict[tuple[uuid.UUID, int], set[asyncio.Future]] = {}
        self.acknowledged: Counter = Counter()  # acknowledge type name -> records (a metric)
        self._loading: dict[ShareKey, asyncio.Future] = {}
        self._write_locks: dict[ShareKey, asyncio.Lock] = {}

    # ---- sessions ------------------------------------------------------------------

    def session(self, group_id: str, member_id: str, epoch: int, connection) -> ShareSession | None:
        """The request's session (None when ``epoch`` closes it); SessionError when it has none or is out of step."""
        key = (group_id, member_id)
        if epoch == INITIAL_EPOCH:
            if key in self.sessions:
                self.member_gone(group_id, member_id)
            session = self.sessions[key] = ShareSession(1, connection)
            return session
        session = self.sessions.get(key)
        if session is None:
            raise SessionError(ErrorCode.SHARE_SESSION_NOT_FOUND)
        if epoch == FINAL_EPOCH:
            return None
        if epoch != session.epoch:
            raise SessionError(ErrorCode.INVALID_SHARE_SESSION_EPOCH)
        session.epoch = epoch + 1 if epoch < 2**31 - 1 else 1
        return session

    def close_session(self, group_id: str, member_id: str) -> None:
        self.member_gone(group_id, member_id)

    def connection_closed(self, connection) -> None:
        """A client connection closed: the share sessions it opened end, their records released."""
        for group_id, member_id in [k for k, s in self.sessions.items() if s.connection is connection]:
            self.member_gone(group_id, member_id)

    def member_gone(self, group_id: str, member_id: str) -> None:
        """Its session ends and the records it holds are released (written before anyone acquires them)."""
        self.sessions.pop((group_id, member_id), None)
        for key, sp in self.partitions.items():
            if key.group_id == group_id and sp.release_member(member_id):
                self._persist_later(key, sp)
                self._wake(key.topic_id, key.partition)

    # ---- share partitions ----------------------------------------------------------------

    async def partition(self, key: ShareKey) -> tuple[SharePartition | None, object, ErrorCode]:
        """(the share partition, the topic partition's log, NONE) where this broker leads it, else the error.
        Made from its durable state at the first use in each leadership (a leader elected again may have
        missed what its successors wrote meanwhile)."""
        topic = self.broker.logs.topic_by_id(key.topic_id)
        if topic is None:
            return None, None, ErrorCode.UNKNOWN_TOPIC_ID
        leader, error = self.broker.replicas.leader_partition(topic.name, key.partition)
        if leader is None:
            return None, None, error
        sp = self.partitions.get(key)
        if sp is None or sp.leader_epoch != leader.leader_epoch:
            loading = self._loading.get(key)
            if loading is None:
                loading = self._loading[key] = self.broker.supervisor.spawn(self._load(key, leader))
                loading.add_done_callback(lambda _: self._loading.pop(key, None))
            error = await asyncio.shield(loading)
            if error:
                return None, None, error
            sp = self.partitions.get(key)
            if sp is None or sp.leader_epoch != leader.leader_epoch:
                return None, None, ErrorCode.NOT_LEADER_OR_FOLLOWER  # leadership moved while it loaded
        if sp.start < leader.log.log_start_offset:  # retention or DeleteRecords passed the window
            sp.reset(leader.log.log_start_offset)
        return sp, leader.log, ErrorCode.NONE

    async def _load(self, key: ShareKey, leader) -> ErrorCode:
        error, snapshot = await self.persister.read(key)
        if error:
            log.warning("share partition %s not loaded: %s", key.coordinator_key(), error.name)
            return ErrorCode.COORDINATOR_NOT_AVAILABLE if error in RETRIABLE else error
        sp = SharePartition(self._initial_offset(key.group_id, leader.log),
                            self.config["group.share.partition.max.record.locks"],
                            self.config["group.share.delivery.count.limit"])
        sp.leader_epoch = leader.leader_epoch
        if snapshot is not None:
            sp.state_epoch = snapshot.state_epoch
            if snapshot.start_offset >= 0:  # (else initialized without a start: share.auto.offset.reset's)
                sp.restore(max(snapshot.start_offset, leader.log.log_start_offset), snapshot.state_batches)
        self.partitions[key] = sp
        return ErrorCode.NONE

    def _initial_offset(self, group_id: str, log_) -> int:
        """Where a share partition with no durable state starts (the group's share.auto.offset.reset)."""
        reset = self.broker.share.group_config(group_id, "share.auto.offset.reset")
        if reset == "earliest":
            return log_.log_start_offset
        if reset.startswith("by_duration:"):
            found = log_.offset_for_timestamp(clock.wall_ms() - parse_duration_ms(reset.removeprefix("by_duration:")))
            return found[0] if found is not None else log_.high_watermark
        return log_.high_watermark

    async def _persist(self, key: ShareKey, sp: SharePartition) -> ErrorCode:
        """Write the share partition's state as it is when its turn comes: one write per key at a time, so a
        later state never lands before an earlier one."""
        lock = self._write_locks.setdefault(key, asyncio.Lock())
        async with lock:
            error = await self.persister.write(key, Snapshot(sp.start, sp.state_batches(), sp.state_epoch,
                                                             sp.leader_epoch))
        if error == ErrorCode.FENCED_STATE_EPOCH and self.partitions.get(key) is sp:
            del self.partitions[key]  # initialized anew meanwhile (AlterShareGroupOffsets): the next use reloads it
        return error

    def _persist_later(self, key: ShareKey, sp: SharePartition) -> None:
        """A write nobody waits on (a lock expiry, a closed session): held by the supervisor, failures logged."""
        self.broker.supervisor.spawn(self._persist(key, sp))

    async def acknowledge(self, group_id: str, member_id: str, key: ShareKey, batches: list[dict]) -> ErrorCode:
        """Apply a partition's acknowledgement batches and write its new state; NONE once it is committed."""
        sp, _, error = await self.partition(key)
        if sp is None:
            return error
        renewed = clock.wall_ms() + self.broker.share.group_config(group_id, "share.record.lock.duration.ms")
        try:
            for batch in batches:
                sp.acknowledge(member_id, batch["first_offset"], batch["last_offset"], batch["acknowledge_types"],
                               renewed)
                self.acknowledged.update(_type_counts(batch))
        except InvalidRecordState as exc:
            log.debug("share group %s: %s", group_id, exc)
            error = ErrorCode.INVALID_RECORD_STATE
        written = await self._persist(key, sp)
        self._wake(key.topic_id, key.partition)
        return error or written

    async def acquire(self, group_id: str, member_id: str, key: ShareKey, max_records: int, max_bytes: int,
                      record_limit: bool = False) -> tuple[ErrorCode, bytes, list[dict]]:
        """(error, the batches read, the acquired ranges) for one partition of a ShareFetch."""
        sp, log_, error = await self.partition(key)
        if sp is None:
            return error, b"", []
        read_committed = self.broker.share.group_config(group_id, "share.isolation.level") == "read_committed"
        end = log_.last_stable_offset if read_committed else log_.high_watermark
        start = sp.first_to_read(end)
        if start is None:
            return ErrorCode.NONE, b"", []
        aborted = None
        try:
            if read_committed:
                data, txns = log_.read_committed(start, max_bytes, True)
                aborted = [(txn.producer_id, txn.first_offset) for txn in txns]
            else:
                data = log_.read(start, max_bytes, end, min_one=True)
        except OffsetOutOfRange:  # the log was cut below the window (a new leader's truncation)
            log.warning("share partition %s: offset %d is past the log's end %d", key.coordinator_key(), start,
                        log_.log_end_offset)
            return ErrorCode.NONE, b"", []
        headers = [(pos, hdr) for pos, hdr in scan_batches(data)]
        deadline = clock.wall_ms() + self.broker.share.group_config(group_id, "share.record.lock.duration.ms")
        acquired = sp.acquire([hdr for _, hdr in headers], end, member_id, deadline, max_records, aborted, record_limit)
        if not acquired:
            return ErrorCode.NONE, b"", []
        # hand back only the batches that hold acquired records
        first, last = acquired[0][0], acquired[-1][1]
        kept = [(pos, hdr) for pos, hdr in headers if hdr.last_offset >= first and hdr.base_offset <= last]
        begin = kept[0][0]
        stop = kept[-1][0] + kept[-1][1].size
        ranges = [{"first_offset": f, "last_offset": l, "delivery_count": c} for f, l, c in acquired]
        return ErrorCode.NONE, bytes(data[begin:stop]), ranges

    async def wait_for_change(self, partitions: list[tuple[uuid.UUID, int]], timeout_s: float) -> None:
        """Park a ShareFetch that acquired nothing until an append to one of ``partitions`` or a release of
        their records may give it something, or ``timeout_s`` passes."""
        woken = asyncio.get_running_loop().create_future()
        for tp in partitions:
            self._waiters.setdefault(tp, set()).add(woken)
        timer = clock.call_later(timeout_s, lambda: woken.done() or woken.set_result(None))
        try:
            await woken
        finally:
            timer.cancel()
            for tp in partitions:
                waiting = self._waiters.get(tp)
                if waiting is not None:
                    waiting.discard(woken)
                    if not waiting:
                        del self._waiters[tp]

    def _wake(self, topic_id: uuid.UUID, partition: int) -> None:
        for woken in self._waiters.pop((topic_id, partition), ()):
            if not woken.done():
                woken.set_result(None)

    def notify_append(self, topic: str, partition: int) -> None:
        if self._waiters:
            found = self.broker.logs.topic(topic)
            if found is not None:
                self._wake(found.topic_id, partition)

    # ---- the clock ------------------------------------------------------------------------

    def expire_locks(self, now: int) -> None:
        for key, sp in self.partitions.items():
            deadline = sp.earliest_deadline
            if deadline is not None and deadline <= now and sp.release_expired(now):
                self._persist_later(key, sp)
                self._wake(key.topic_id, key.partition)

    # ---- the admin's view: start offsets (Describe/Alter/DeleteShareGroupOffsets) -------------

    async def start_offsets(self, group_id: str, keys: list[ShareKey]) -> dict[ShareKey, tuple[int, int]]:
        """Each of the group's share partitions ``keys`` with state: (start offset, lag = records not yet done,
        from ReadShareGroupStateSummary's delivery complete count (KIP-1226); -1 where this broker has no
        replica of the topic partition to count them, or the partition has no start yet)."""
        found = {}
        for key, summary in (await self.persister.read_summaries(group_id, keys)).items():
            topic = self.broker.logs.topic_by_id(key.topic_id)
            log_ = self.broker.logs.log(topic.name, key.partition) if topic is not None else None
            lag = -1
            if log_ is not None and summary.start_offset >= 0 and summary.delivery_complete_count >= 0:
                lag = max(0, log_.high_watermark - summary.start_offset - summary.delivery_complete_count)
            found[key] = (summary.start_offset, lag)
        return found

    async def initialize(self, key: ShareKey, state_epoch: int, start: int) -> ErrorCode:
        """The share partition's state starts anew at ``start`` (-1: at share.auto.offset.reset when it is first
        fetched); one led here is made again from it at its next use."""
        error = await self.persister.initialize(key, state_epoch, start)
        if error == ErrorCode.NONE:
            self.partitions.pop(key, None)
        return error

    async def delete_state(self, key: ShareKey) -> ErrorCode:
        """Forget the share partition: the next fetch starts it at share.auto.offset.reset."""
        self.partitions.pop(key, None)
        return await self.persister.write(key, None)

    # ---- groups ---------------------------------------------------------------------------

    async def delete_group(self, group_id: str, keys: list[ShareKey]) -> ErrorCode:
        error = ErrorCode.NONE
        for key in keys:
            error = error or await self.delete_state(key)
        for session in [s for s in self.sessions if s[0] == group_id]:
            del self.sessions[session]
        return error


def _type_counts(batch: dict) -> Counter:
    types, n = batch["acknowledge_types"], batch["last_offset"] - batch["first_offset"] + 1
    if len(types) == 1:
        return Counter({AcknowledgeType(types[0]).name.lower(): n})
    return Counter(AcknowledgeType(t).name.lower() for t in types)
