"""ShareGroupCoordinator: membership and assignment of share groups (ShareGroupHeartbeat, ShareGroupDescribe).

A share group has no revocation step (KIP-932): members may share partitions, so
a member is simply given its share of the target assignment, and its epoch is the
group epoch the assignment was computed at. The group epoch moves when a member
joins, leaves or is fenced (no heartbeat for group.share.session.timeout.ms), or
when a subscription or a subscribed topic's partition count changes.

The group lives in its __consumer_offsets partition as Kafka's share group records
(records.py): a heartbeat that changes something is answered once they are committed,
and the coordinator elected next replays them (``loaded``), so the group keeps its
epochs, members (each with a fresh session to find the new coordinator) and
assignment; an empty group exists until DeleteGroups. What must survive for the
records themselves -- which are done -- is the share-partition state (persister.py).
"""

from __future__ import annotations

import asyncio
import logging
import uuid

from broker.coordinator.partitions import Pending, settled, then
from broker.errors import ErrorCode
from broker.group.coordinator_records import assigned_topics, wire
from storage import clock

from . import assignor, records
from .group import ShareGroup, ShareMember, StatePartitions
from .persister import ShareKey

log = logging.getLogger("moldau.share")

LEAVE_GROUP_EPOCH = -1
MAX_MEMBER_ID = 36  # Kafka refuses a longer one (a UUID in its longest string form)




class ShareGroupCoordinator:
    def __init__(self, broker) -> None:
        self.broker = broker
        self.config = broker.config
        self.groups: dict[str, ShareGroup] = {}
        self._initializing: dict[str, asyncio.Future] = {}  # group id -> its InitializeShareGroupState round
        broker.groups.share = self  # the group coordinator's loads and unloads hand us the share groups

    # ---- ShareGroupHeartbeat ---------------------------------------------------------

    def heartbeat(self, request: dict, client_id: str, client_host: str) -> dict | Pending:
        """The response, or an awaitable of it once the records of what changed are committed."""
        group_id, member_id, epoch = request["group_id"], request["member_id"], request["member_epoch"]
        if not self.config["group.share.enable"]:
            return _error(ErrorCode.UNSUPPORTED_VERSION, "share groups are disabled (group.share.enable)")
        if not group_id or not member_id or len(member_id) > MAX_MEMBER_ID or epoch < LEAVE_GROUP_EPOCH:
            return _error(ErrorCode.INVALID_REQUEST, "GroupId and a MemberId of at most 36 characters are required")
        if error := self.broker.groups.coordinator_error(group_id):
            return _error(error)
        if group_id in self.broker.groups.groups:
            return _error(ErrorCode.GROUP_ID_NOT_FOUND, f"group {group_id} is not a share group")
        group = self.groups.get(group_id)
        if epoch == LEAVE_GROUP_EPOCH:
            batch = []
            if group is not None and member_id in group.members:
                batch = self._remove(group, member_id, "left")
            return self._write(group_id, batch, _response(member_id, LEAVE_GROUP_EPOCH, 0, None))
        if epoch == 0 and request["subscribed_topic_names"] is None:
            return _error(ErrorCode.INVALID_REQUEST, "SubscribedTopicNames is required when joining")
        member = group.members.get(member_id) if group is not None else None
        batch: list = []
        if member is None:
            if epoch != 0:
                return _error(ErrorCode.UNKNOWN_MEMBER_ID, f"member {member_id} is not in group {group_id}")
            if group is None:
                if len(self.groups) >= self.config["group.share.max.groups"]:
                    return _error(ErrorCode.GROUP_MAX_SIZE_REACHED, "group.share.max.groups reached")
                group = self.groups[group_id] = ShareGroup(group_id)
            if len(group.members) >= self.config["group.share.max.size"]:
                return _error(ErrorCode.GROUP_MAX_SIZE_REACHED, f"group {group_id} has group.share.max.size members")
        elif epoch > member.member_epoch:
            return _error(ErrorCode.FENCED_MEMBER_EPOCH, f"epoch {epoch} is ahead of the member's")
        epoch_before = group.group_epoch
        if member is None:
            member = group.members[member_id] = ShareMember(member_id)
            group.group_epoch += 1
            log.info("share group %s: member %s joined (epoch %d)", group_id, member_id, group.group_epoch)
            metadata_before = None
        else:
            metadata_before = records.member_metadata(group_id, member)
        member.client_id, member.client_host = client_id, client_host
        member.deadline_ms = clock.wall_ms() + self.broker.share.group_config(group_id, "share.session.timeout.ms")
        if request["rack_id"] is not None:
            member.rack_id = request["rack_id"]
        if request["subscribed_topic_names"] is not None:
            subscribed = tuple(sorted(set(request["subscribed_topic_names"])))
            if subscribed != member.subscribed:
                member.subscribed = subscribed
                group.group_epoch += metadata_before is not None  # (a new member bumped it already)
        if (metadata := records.member_metadata(group_id, member)) != metadata_before:
            batch.append(metadata)
        self._refresh(group, epoch_before, batch)
        before = member.member_epoch
        if before != group.assignment_epoch or metadata_before is None:
            member.previous_member_epoch, member.member_epoch = before, group.assignment_epoch
            batch.append(records.current_assignment(group_id, member))
        full = epoch == 0 or epoch != member.member_epoch  # (an older epoch: the answer that moved it was lost)
        response = _response(member_id, member.member_epoch,
                             self.broker.share.group_config(group_id, "share.heartbeat.interval.ms"),
                             member.assignment if full else None)
        uninitialized = self._uninitialized(group)
        if uninitialized:
            group.initializing.update(uninitialized)
            batch.append(records.state_partitions(group))
        answer = self._write(group_id, batch, response)
        if not uninitialized and group_id not in self._initializing:
            return answer
        return self._after_initialization(group, answer)

    def _write(self, group_id: str, batch: list, response: dict) -> dict | Pending:
        """``response`` once ``batch`` is committed in the group's partition (at once if it is empty)."""
        if not batch:
            return response
        error = self.broker.groups.manager.store_records(group_id, batch)
        return then(self.broker.groups.committed(group_id, error),
                    lambda e: response if e == ErrorCode.NONE else _error(e))

    # ---- share state: InitializeShareGroupState when a group first subscribes to a topic ---------

    def _uninitialized(self, group: ShareGroup) -> dict[uuid.UUID, StatePartitions]:
        """The subscribed share partitions whose state is not initialized (nor being initialized right now)."""
        if group.group_id in self._initializing:
            return {}
        out = {}
        for name, (topic_id, count) in group.partition_counts.items():
            known = group.initialized.get(topic_id)
            missing = frozenset(range(count)) - (known.partitions if known is not None else frozenset())
            if missing and topic_id not in group.deleting:
                out[topic_id] = StatePartitions(name, missing, clock.wall_ms())
        return out

    async def _after_initialization(self, group: ShareGroup, answer) -> dict:
        """The heartbeat's answer once the group's share partitions being initialized are (so that no member
        fetches one before its state is there), initializing them if no one is."""
        response = await settled(answer)
        if response["error_code"]:
            return response
        group_id = group.group_id
        task = self._initializing.get(group_id)
        if task is None and group.initializing:
            task = self._initializing[group_id] = self.broker.supervisor.spawn(self._initialize(group))
            task.add_done_callback(lambda _: self._initializing.pop(group_id, None))
        if task is not None and not await asyncio.shield(task):
            # no member may fetch a share partition before its state is there: the member asks again
            return _error(ErrorCode.COORDINATOR_NOT_AVAILABLE, "share state not initialized yet")
        return response

    async def _initialize(self, group: ShareGroup) -> bool:
        """InitializeShareGroupState of the group's initializing partitions (start -1: the leader's
        share.auto.offset.reset, state epoch = the group epoch); those done move to initialized. Whether all
        are."""
        epoch, keys = group.group_epoch, self.share_keys(group, initialized=False)
        errors = await asyncio.gather(*(self.broker.share.partitions.initialize(k, epoch, -1) for k in keys))
        done = [k for k, e in zip(keys, errors, strict=True) if e == ErrorCode.NONE]
        for key, error in zip(keys, errors, strict=True):
            if error != ErrorCode.NONE:
                log.warning("share group %s: state of %s not initialized (%s)", group.group_id,
                            key.coordinator_key(), error.name)
        if done and self.groups.get(group.group_id) is group:
            return await self._mark_initialized(group, done) == ErrorCode.NONE and len(done) == len(keys)
        return False

    async def _mark_initialized(self, group: ShareGroup, keys: list[ShareKey]) -> ErrorCode:
        """Record ``keys`` as initialized (no longer initializing); NONE once committed."""
        for key in keys:
            entry = group.initializing.get(key.topic_id)
            if entry is not None:
                rest = entry.partitions - {key.partition}
                if rest:
                    group.initializing[key.topic_id] = entry._replace(partitions=rest)
                else:
                    del group.initializing[key.topic_id]
            topic = self.broker.logs.topic_by_id(key.topic_id)
            known = group.initialized.get(key.topic_id) or StatePartitions(
                topic.name if topic is not None else "", frozenset(), clock.wall_ms())
            group.initialized[key.topic_id] = known._replace(partitions=known.partitions | {key.partition})
        return await self._store(group.group_id, [records.state_partitions(group)])

    async def _store(self, group_id: str, batch: list) -> ErrorCode:
        error = self.broker.groups.manager.store_records(group_id, batch)
        return await settled(self.broker.groups.committed(group_id, error))

    def share_keys(self, group: ShareGroup, initialized: bool = True) -> list[ShareKey]:
        """The group's share partitions whose state is initialized (else: being initialized)."""
        entries = group.initialized if initialized else group.initializing
        return [ShareKey(group.group_id, t, p) for t, e in entries.items() for p in sorted(e.partitions)]

    def _refresh(self, group: ShareGroup, epoch_before: int, batch: list) -> None:
        """Bump the group epoch if a subscribed topic changed; recompute the target if the epoch moved. The
        records of what changed go to ``batch``."""
        names = {name for m in group.members.values() for name in m.subscribed}
        counts = {}
        for name in names:
            topic = self.broker.logs.topic(name)
            if topic is not None:
                counts[name] = (topic.topic_id, topic.num_partitions)
        if counts != group.partition_counts:
            group.partition_counts = counts
            group.group_epoch += 1
        if group.group_epoch != epoch_before:
            batch.append(records.group_epoch(group.group_id, group.group_epoch))
        if group.assignment_epoch != group.group_epoch:
            target = assignor.assign({m.member_id: m.subscribed for m in group.members.values()}, counts)
            for member_id, assigned in target.items():
                member = group.members[member_id]
                if member.assignment != assigned:
                    member.assignment = assigned
                    batch.append(records.target_assignment(group.group_id, member_id, assigned))
            group.assignment_epoch = group.group_epoch
            batch.append(records.assignment_epoch(group.group_id, group.assignment_epoch))

    def _remove(self, group: ShareGroup, member_id: str, why: str) -> list:
        """Remove the member (its records stay acquired until its share session closes or their locks run
        out); the records that say so."""
        del group.members[member_id]
        batch = records.member_tombstones(group.group_id, member_id)
        epoch_before = group.group_epoch
        group.group_epoch += 1
        self._refresh(group, epoch_before, batch)
        log.info("share group %s: member %s %s (epoch %d)", group.group_id, member_id, why, group.group_epoch)
        return batch

    def expire_members(self, now: int) -> None:
        """Fence the members whose session timed out (no heartbeat for group.share.session.timeout.ms)."""
        for group in list(self.groups.values()):
            for member in [m for m in group.members.values() if m.deadline_ms <= now]:
                error = self.broker.groups.manager.store_records(
                    group.group_id, self._remove(group, member.member_id, "fenced: session timed out"))
                if error != ErrorCode.NONE:
                    log.warning("share group %s: could not write the fencing of %s (%s)", group.group_id,
                                member.member_id, error.name)

    # ---- loading, unloading ------------------------------------------------------------

    def loaded(self, group: ShareGroup) -> None:
        """A group replayed from its partition: its members get a session timeout from now to find us."""
        group.partition_counts = assigned_topics((m.assignment for m in group.members.values()), self.broker.logs)
        deadline = clock.wall_ms() + self.broker.share.group_config(group.group_id, "share.session.timeout.ms")
        for member in group.members.values():
            member.deadline_ms = deadline
        self.groups[group.group_id] = group

    def unloaded(self, partition: int) -> None:
        """Another broker coordinates the groups of this __consumer_offsets partition now."""
        for group_id in [g for g in self.groups if self.broker.groups.offsets_partition(g) == partition]:
            del self.groups[group_id]

    # ---- what the group tools see -----------------------------------------------------

    def group_ids(self) -> set[str]:
        """Every share group this coordinator knows (loaded from, or written to, __consumer_offsets)."""
        return {g for g in self.groups if self.broker.groups.coordinator_error(g) == ErrorCode.NONE}

    def state(self, group_id: str) -> str:
        group = self.groups.get(group_id)
        return group.state() if group is not None else "Empty"

    def describe(self, group_id: str) -> dict:
        if error := self.broker.groups.coordinator_error(group_id):
            return describe_error(group_id, error)
        group = self.groups.get(group_id)
        if group is None:
            return describe_error(group_id, ErrorCode.GROUP_ID_NOT_FOUND, f"group {group_id} is not a share group")
        names = {topic_id: name for name, (topic_id, _) in group.partition_counts.items()}
        members = [{
            "member_id": m.member_id, "rack_id": m.rack_id, "member_epoch": m.member_epoch,
            "client_id": m.client_id, "client_host": m.client_host, "subscribed_topic_names": list(m.subscribed),
            "assignment": {"topic_partitions": [{**t, "topic_name": names.get(t["topic_id"], "")}
                                                for t in wire(m.assignment)]},
        } for m in group.members.values()]
        return {"error_code": 0, "error_message": None, "group_id": group_id, "group_state": group.state(),
                "group_epoch": group.group_epoch, "assignment_epoch": group.assignment_epoch,
                "assignor_name": "simple", "members": members, "authorized_operations": -(2**31)}

    def members(self, group_id: str) -> int:
        group = self.groups.get(group_id)
        return len(group.members) if group is not None else 0

    async def delete(self, group_id: str) -> ErrorCode:
        """DeleteGroups of a share group: only an empty one. Its share-partition state goes first, then its
        records (tombstones, to be committed before the answer: the handler waits for them)."""
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.GROUP_ID_NOT_FOUND
        if group.members:
            return ErrorCode.NON_EMPTY_GROUP
        keys = self.share_keys(group) + self.share_keys(group, initialized=False)
        error = await self.broker.share.partitions.delete_group(group_id, keys)
        if error == ErrorCode.NONE:
            error = self.broker.groups.manager.store_records(group_id, records.group_tombstones(group_id))
            if error == ErrorCode.NONE and self.groups.get(group_id) is group:
                del self.groups[group_id]
        return error

    # ---- the admin's offsets (AlterShareGroupOffsets, DeleteShareGroupOffsets) ----------------

    async def alter_offsets(self, group: ShareGroup, starts: dict[ShareKey, int]) -> dict[ShareKey, ErrorCode]:
        """An empty group's share partitions start anew at ``starts`` (InitializeShareGroupState at the group
        epoch), then are recorded as initialized."""
        keys = list(starts)
        errors = await asyncio.gather(*(self.broker.share.partitions.initialize(k, group.group_epoch, starts[k])
                                        for k in keys))
        results = dict(zip(keys, errors, strict=True))
        done = [k for k, e in results.items() if e == ErrorCode.NONE]
        if done:
            error = await self._mark_initialized(group, done)
            results.update(dict.fromkeys(done, error))
        return results

    async def delete_offsets(self, group: ShareGroup, topic_ids: list[uuid.UUID]) -> ErrorCode:
        """An empty group forgets its share state of whole topics: they move to DeletingTopics, their state is
        deleted, then they are dropped from the record; the next fetch starts at share.auto.offset.reset."""
        keys = []
        for topic_id in topic_ids:
            for entries in (group.initialized, group.initializing):
                entry = entries.pop(topic_id, None)
                if entry is not None:
                    group.deleting[topic_id] = entry.name
                    keys += [ShareKey(group.group_id, topic_id, p) for p in sorted(entry.partitions)]
        if not keys:
            return ErrorCode.NONE
        error = await self._store(group.group_id, [records.state_partitions(group)])
        for key in keys:
            error = error or await self.broker.share.partitions.delete_state(key)
        if error == ErrorCode.NONE:
            for topic_id in topic_ids:
                group.deleting.pop(topic_id, None)
            error = await self._store(group.group_id, [records.state_partitions(group)])
        return error


def describe_error(group_id: str, error: ErrorCode, message: str | None = None) -> dict:
    return {"error_code": error, "error_message": message, "group_id": group_id, "group_state": "",
            "group_epoch": -1, "assignment_epoch": -1, "assignor_name": "", "members": [],
            "authorized_operations": -(2**31)}


def _error(error: ErrorCode, message: str | None = None) -> dict:
    return {"throttle_time_ms": 0, "error_code": error, "error_message": message, "member_id": None,
            "member_epoch": -1, "heartbeat_interval_ms": 0, "assignment": None}


def _response(member_id: str, epoch: int, interval_ms: int, assignment) -> dict:
    return {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "member_id": member_id,
            "member_epoch": epoch, "heartbeat_interval_ms": interval_ms,
            "assignment": None if assignment is None else {"topic_partitions": wire(assignment)}}
