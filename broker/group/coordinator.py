"""GroupCoordinator: Kafka's classic group protocol, for the groups of the __consumer_offsets partitions this broker leads.

A group moves Empty -> PreparingRebalance -> CompletingRebalance -> Stable
(and back to PreparingRebalance whenever membership or subscriptions change).
JoinGroup and SyncGroup are answered through futures that complete when the
rebalance reaches them. Every deadline is a timer (storage/clock.py's call_later) that is
re-armed or cancelled as the group moves on: the initial rebalance delay, the
rebalance timeout (members that do not rejoin are dropped), the sync timeout
(members that never send SyncGroup are dropped), each member's session
timeout (re-armed by heartbeats), and the periodic offset retention check.

A partition's groups are loaded when this broker becomes its leader and
unloaded (timers cancelled, waiting JoinGroup and SyncGroup answered
NOT_COORDINATOR) when it stops leading it; requests for them answer
COORDINATOR_LOAD_IN_PROGRESS or NOT_COORDINATOR meanwhile (OwnedPartitions).

The broker never looks inside assignments; protocol metadata is read only to
learn a consumer group's subscribed topics.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import logging
import uuid
from typing import Awaitable, Callable, Union

from broker.coordinator.partitions import OwnedPartitions, Pending, then
from broker.errors import ErrorCode
from storage import clock

from ..coordinator.internal_topics import OFFSETS_TOPIC
from . import consumer_records, records
from .consumer_coordinator import ConsumerGroupCoordinator
from .manager import GroupMetadataManager
from .metadata import (
    CONSUMER_PROTOCOL_TYPE,
    UNKNOWN_MEMBER_ID,
    CommittedOffset,
    GroupMetadata,
    GroupState,
    JoinGroupResult,
    MemberMetadata,
    SyncGroupResult,
    TopicPartition,
)

# A new member's JoinGroup cannot heartbeat; drop it if its rebalance never completes.
NEW_MEMBER_JOIN_TIMEOUT_MS = 5 * 60 * 1000

PREPARING = GroupState.PREPARING_REBALANCE
COMPLETING = GroupState.COMPLETING_REBALANCE
STABLE = GroupState.STABLE
EMPTY = GroupState.EMPTY

log = logging.getLogger("moldau.group")

PendingResults = Union[dict[TopicPartition, ErrorCode], Awaitable[dict[TopicPartition, ErrorCode]]]


def _cancel(timer: asyncio.TimerHandle | None) -> None:
    if timer is not None:
        timer.cancel()


def _answered(result) -> asyncio.Future:
    future = asyncio.get_running_loop().create_future()
    future.set_result(result)
    return future


def _check_member(group: GroupMetadata, member_id: str, instance_id: str | None, generation_id: int) -> ErrorCode:
    if group.is_static_member_fenced(instance_id, member_id):
        return ErrorCode.FENCED_INSTANCE_ID
    if member_id not in group.members:
        return ErrorCode.UNKNOWN_MEMBER_ID
    if generation_id != group.generation_id:
        return ErrorCode.ILLEGAL_GENERATION
    return ErrorCode.NONE


class GroupCoordinator:
    """The groups of the partitions served here. Dead groups are removed at once, so ``groups`` holds live ones only."""

    def __init__(self, logs, replicas, config, notify_append, supervisor, group_configs):
        self.config = config
        self.group_configs = group_configs  # a group's own consumer.* settings over the broker's
        self.manager = GroupMetadataManager(logs, replicas, config, notify_append)
        self.groups: dict[str, GroupMetadata] = {}
        self.supervisor = supervisor
        self.partitions = OwnedPartitions(OFFSETS_TOPIC, supervisor)
        self.consumer = ConsumerGroupCoordinator(self)  # KIP-848 groups, kept in the same groups
        self.share = None  # broker/share's ShareGroupCoordinator: the share groups of our partitions are its

    def start(self) -> None:
        """Start the offset retention check (on the running loop): Kafka's delete-expired-group-metadata."""
        self.supervisor.every("delete-expired-group-metadata",
                              lambda: self.config["offsets.retention.check.interval.ms"] / 1000, self._check_retention)

    # ---- the partitions this broker leads -------------------------------------------

    def on_election(self, partition: int, epoch: int) -> None:
        self.partitions.elect(partition, epoch, self._load)

    async def _load(self, partition: int) -> None:
        for group in (await self.manager.load_partition(partition)).values():
            if group.share is not None:
                self.share.loaded(group.share)
                continue
            self.groups[group.group_id] = group
            for member in group.members.values():  # each gets a session timeout from now to find us
                self._schedule_session_timeout(group, member)
            if group.consumer is not None:
                self.consumer.loaded(group)

    def on_resignation(self, partition: int) -> None:
        """Another broker leads the partition now: its groups are its coordinator's."""
        if not self.partitions.resign(partition):
            return
        unloaded = [g for g in self.groups.values() if self.offsets_partition(g.group_id) == partition]
        for group in unloaded:
            for member in group.members.values():
                member.cancel_session_timer()
                group.complete_join(member, JoinGroupResult(ErrorCode.NOT_COORDINATOR, member.member_id))
                group.complete_sync(member, SyncGroupResult(ErrorCode.NOT_COORDINATOR))
            self._remove_group(group)
        self.share.unloaded(partition)
        log.info("unloaded %d groups of %s-%d", len(unloaded), OFFSETS_TOPIC, partition)

    def coordinator_error(self, group_id: str) -> ErrorCode:
        """NONE if this broker coordinates the group now, else COORDINATOR_LOAD_IN_PROGRESS or NOT_COORDINATOR."""
        return self.partitions.error(self.offsets_partition(group_id))

    def committed(self, group_id: str, error: ErrorCode = ErrorCode.NONE) -> Pending:
        """``error``, or what to answer once the group's writes so far are committed (acks=all)."""
        return self.manager.committed(group_id, error)

    # ---- JoinGroup ------------------------------------------------------------------

    def join_group(
        self, group_id: str, joining: MemberMetadata, *, require_known_member_id: bool, supports_skip_assignment: bool
    ) -> asyncio.Future:
        """A future JoinGroupResult; ``joining`` carries the request (member_id "" for a new member)."""
        timeout = joining.session_timeout_ms
        group = self.groups.get(group_id)
        if not group_id:
            error = ErrorCode.INVALID_GROUP_ID
        elif self.coordinator_error(group_id):
            error = self.coordinator_error(group_id)
        elif not self.config["group.min.session.timeout.ms"] <= timeout <= self.config["group.max.session.timeout.ms"]:
            error = ErrorCode.INVALID_SESSION_TIMEOUT
        elif group is None and joining.member_id != UNKNOWN_MEMBER_ID:
            error = ErrorCode.UNKNOWN_MEMBER_ID
        elif group is not None and group.consumer is not None and not group.is_empty():
            # an upgraded group's classic members go on through the bridge
            result = self.consumer.classic_join(group, joining, require_known_member_id)
            return result if inspect.isawaitable(result) else _answered(result)
        else:
            if group is None:
                group = self.groups[group_id] = GroupMetadata(group_id, clock.wall_ms())
            if group.consumer is not None:  # an empty consumer-protocol group becomes a classic one
                self.manager.store_records(group_id, consumer_records.group_tombstones(group_id))
                group.consumer = None
            if group.supports_protocols(joining.protocol_type, joining.protocols):
                future = asyncio.get_running_loop().create_future()
                if joining.member_id == UNKNOWN_MEMBER_ID:
                    self._join_new_member(group, joining, future, require_known_member_id, supports_skip_assignment)
                else:
                    self._join_known_member(group, joining, future)
                self._try_complete_join(group)
                return future
            error = ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        return _answered(JoinGroupResult(error, joining.member_id))

    def _join_new_member(self, group, joining, future, require_known_member_id, supports_skip_assignment) -> None:
        instance_id = joining.group_instance_id
        joining.member_id = f"{instance_id or joining.client_id}-{uuid.uuid4()}"
        if instance_id is not None and instance_id in group.static_members:
            self._rejoin_static_member(group, joining, future, supports_skip_assignment)
        elif len(group.members) + len(group.pending_members) >= self.config["group.max.size"]:
            # members waiting to rejoin with their id count too: they would be let in
            future.set_result(JoinGroupResult(ErrorCode.GROUP_MAX_SIZE_REACHED, UNKNOWN_MEMBER_ID))
        elif instance_id is None and require_known_member_id:
            # the client must come back with this id: a member that gives up leaves no trace
            group.pending_members[joining.member_id] = clock.call_later(
                joining.session_timeout_ms / 1000, self._on_pending_member_expired, group, joining.member_id
            )
            future.set_result(JoinGroupResult(ErrorCode.MEMBER_ID_REQUIRED, joining.member_id))
        else:
            self._add_member_and_rebalance(group, joining, future)

    def _join_known_member(self, group, joining, future) -> None:
        member_id, instance_id = joining.member_id, joining.group_instance_id
        if member_id in group.pending_members and instance_id is None:
            self._add_member_and_rebalance(group, joining, future)
            return
        if group.is_static_member_fenced(instance_id, member_id):
            future.set_result(JoinGroupResult(ErrorCode.FENCED_INSTANCE_ID, member_id))
            return
        member = group.members.get(member_id)
        if member is None or (instance_id is not None and instance_id not in group.static_members):
            future.set_result(JoinGroupResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id))
            return
        unchanged = member.matches(joining.protocols)
        if group.is_in(COMPLETING) and unchanged or group.is_in(STABLE) and unchanged and not group.is_leader(member_id):
            # it lost the JoinGroup response, or a follower rejoined for nothing: the current generation stands
            future.set_result(self._join_result(group, member))
        else:
            group.update_member(member, joining, future)
            self._maybe_prepare_rebalance(group, f"member {member_id} rejoined")

    def _join_result(self, group: GroupMetadata, member: MemberMetadata) -> JoinGroupResult:
        is_leader = group.is_leader(member.member_id)
        return JoinGroupResult(
            ErrorCode.NONE, member.member_id, group.generation_id, group.protocol_type, group.protocol_name,
            group.leader_id, group.member_list() if is_leader else [],
        )

    def _add_member_and_rebalance(self, group, member: MemberMetadata, future) -> None:
        member.is_new = True
        if group.is_in(PREPARING) and group.generation_id == 0:
            group.new_member_added = True
        group.add(member, future)
        self._schedule_session_timeout(group, member, NEW_MEMBER_JOIN_TIMEOUT_MS)
        self._maybe_prepare_rebalance(group, f"new member {member.member_id} joined")

    def _rejoin_static_member(self, group, joining, future, supports_skip_assignment) -> None:
        """A known group.instance.id with a fresh member id: it replaces its old incarnation."""
        instance_id, new_id = joining.group_instance_id, joining.member_id
        old_id = group.static_members[instance_id]
        old_leader = group.leader_id
        member = group.replace_static_member(instance_id, old_id, new_id)
        previous = dataclasses.replace(member, join_future=None, sync_future=None, session_timer=None)
        group.update_member(member, joining, future)
        self._schedule_session_timeout(group, member)
        log.info("group %s: static member %s rejoined as %s (was %s)", group.group_id, instance_id, new_id, old_id)
        if group.is_in(COMPLETING):
            # the leader may be assigning to the old member id: start over
            self._prepare_rebalance(group, f"static member {instance_id} rejoined during CompletingRebalance")
        elif group.is_in(STABLE) and group.select_protocol() != group.protocol_name:
            self._prepare_rebalance(group, f"static member {instance_id} rejoined with other protocols")
        elif group.is_in(STABLE):
            # same protocols: no rebalance, just persist the new member id
            error = self.manager.store_group(group, {m.member_id: m.assignment for m in group.members.values()})
            if error != ErrorCode.NONE:
                member.join_future = None
                group.update_member(member, previous, None)
                group.replace_static_member(instance_id, new_id, old_id)
                self._schedule_session_timeout(group, member)
                future.set_result(JoinGroupResult(error, UNKNOWN_MEMBER_ID))
                return
            # a leader that can skip assignment (v9+) is told so; others think they are followers
            skip = supports_skip_assignment and group.is_leader(new_id)
            group.complete_join(member, JoinGroupResult(
                ErrorCode.NONE, new_id, group.generation_id, group.protocol_type, group.protocol_name,
                old_leader, group.member_list() if skip else [], skip,
            ))

    # ---- rebalancing ------------------------------------------------------------------

    def _maybe_prepare_rebalance(self, group: GroupMetadata, reason: str) -> None:
        if group.is_in(STABLE, COMPLETING, EMPTY):
            self._prepare_rebalance(group, reason)

    def _prepare_rebalance(self, group: GroupMetadata, reason: str) -> None:
        if group.is_in(COMPLETING):
            self._propagate_assignment_error(group, ErrorCode.REBALANCE_IN_PROGRESS)
        _cancel(group.sync_timer)
        _cancel(group.join_timer)
        group.sync_timer = None
        initial = group.is_in(EMPTY)
        group.transition_to(PREPARING)
        group.in_initial_delay = initial
        log.info("preparing to rebalance group %s (generation %d): %s", group.group_id, group.generation_id, reason)
        if initial:
            # let more of a starting group's members arrive before the first generation
            delay = self.config["group.initial.rebalance.delay.ms"]
            remaining = max(group.rebalance_timeout_ms - delay, 0)
            group.join_timer = clock.call_later(delay / 1000, self._on_initial_delay_expired, group, remaining)
        else:
            group.join_timer = clock.call_later(group.rebalance_timeout_ms / 1000, self._complete_join, group)
            self._try_complete_join(group)

    def _on_initial_delay_expired(self, group: GroupMetadata, remaining_ms: int) -> None:
        if not group.is_in(PREPARING):
            return
        if group.new_member_added and remaining_ms > 0:
            group.new_member_added = False
            delay = min(self.config["group.initial.rebalance.delay.ms"], remaining_ms)
            group.join_timer = clock.call_later(delay / 1000, self._on_initial_delay_expired, group,
                                                remaining_ms - delay)
        else:
            self._complete_join(group)

    def _try_complete_join(self, group: GroupMetadata) -> None:
        if group.is_in(PREPARING) and not group.in_initial_delay and group.has_all_members_joined():
            self._complete_join(group)

    def _complete_join(self, group: GroupMetadata) -> None:
        """End the join phase: drop dynamic members that did not rejoin, start the next generation."""
        if not group.is_in(PREPARING):
            return
        _cancel(group.join_timer)
        group.join_timer = None
        group.in_initial_delay = False
        for member in [m for m in group.members.values() if m.join_future is None and not m.is_static]:
            log.info("group %s: member %s did not rejoin in time; removing it", group.group_id, member.member_id)
            group.remove(member.member_id)
        if group.members and not group.elect_joined_leader():
            log.warning("group %s: no member rejoined; waiting for session timeouts", group.group_id)
            group.join_timer = clock.call_later(group.rebalance_timeout_ms / 1000, self._complete_join, group)
            return
        group.init_next_generation(clock.wall_ms())
        if group.is_in(EMPTY):
            log.info("group %s with generation %d is now empty", group.group_id, group.generation_id)
            self._store_or_log(group, {})
            return
        log.info("stabilized group %s generation %d (%d members, protocol %s)",
                 group.group_id, group.generation_id, len(group.members), group.protocol_name)
        for member in group.members.values():
            group.complete_join(member, self._join_result(group, member))
            self._schedule_session_timeout(group, member)
            member.is_new = False
        group.sync_timer = clock.call_later(group.rebalance_timeout_ms / 1000, self._on_sync_expired, group,
                                            group.generation_id)

    def _store_or_log(self, group: GroupMetadata, assignment: dict[str, bytes]) -> None:
        error = self.manager.store_group(group, assignment)
        if error != ErrorCode.NONE:
            log.error("could not store group %s generation %d: %s", group.group_id, group.generation_id, error.name)

    def _on_sync_expired(self, group: GroupMetadata, generation_id: int) -> None:
        group.sync_timer = None
        if generation_id != group.generation_id or not group.is_in(COMPLETING, STABLE) or not group.pending_sync:
            return
        missing = sorted(group.pending_sync)
        for member_id in missing:
            group.remove(member_id)
        self._prepare_rebalance(group, f"members {', '.join(missing)} did not send SyncGroup in time")

    def _propagate_assignment(self, group: GroupMetadata, error: ErrorCode) -> None:
        for member in group.members.values():
            if error == ErrorCode.NONE:
                result = SyncGroupResult(error, group.protocol_type, group.protocol_name, member.assignment)
            else:
                result = SyncGroupResult(error)
            if group.complete_sync(member, result):
                # its session timer was not armed while it waited
                self._schedule_session_timeout(group, member)

    def _propagate_assignment_error(self, group: GroupMetadata, error: ErrorCode) -> None:
        for member in group.members.values():
            member.assignment = b""
        self._propagate_assignment(group, error)

    # ---- SyncGroup, Heartbeat, LeaveGroup ---------------------------------------------

    def _consumer_group(self, group_id: str) -> GroupMetadata | None:
        """The group if this broker coordinates it now and it is a KIP-848 one (its classic members are bridged)."""
        group = self.groups.get(group_id)
        return group if group is not None and group.consumer is not None and not self.coordinator_error(group_id) else None

    def hand_over(self, group: GroupMetadata) -> None:
        """A classic group upgraded to a consumer group: its classic state goes; members waiting on a join or
        sync are told REBALANCE_IN_PROGRESS and rejoin through the bridge."""
        for member in group.members.values():
            member.cancel_session_timer()
            group.complete_join(member, JoinGroupResult(ErrorCode.REBALANCE_IN_PROGRESS, member.member_id))
            group.complete_sync(member, SyncGroupResult(ErrorCode.REBALANCE_IN_PROGRESS))
        for timer in (group.join_timer, group.sync_timer, *group.pending_members.values()):
            _cancel(timer)
        group.join_timer = group.sync_timer = None
        group.pending_members.clear()
        group.pending_sync.clear()
        group.members.clear()
        group.static_members.clear()
        group.protocol_type = group.protocol_name = group.leader_id = None
        group.generation_id = 0
        group.state = EMPTY
        group.subscribed_topics = None

    def take_over(self, group: GroupMetadata, generation: int, members: list[MemberMetadata]) -> list:
        """A consumer group downgraded to classic: its members at ``generation`` with their assignments, then a
        rebalance so that they rejoin. Returns the group's classic record (the caller appends it)."""
        group.protocol_type, group.generation_id = CONSUMER_PROTOCOL_TYPE, generation
        for member in members:
            group.members[member.member_id] = member
            if member.is_static:
                group.static_members[member.group_instance_id] = member.member_id
            self._schedule_session_timeout(group, member)
        group.protocol_name = group.select_protocol()
        group.leader_id = members[0].member_id
        group.state = STABLE
        group.update_subscribed_topics()
        record = (records.group_metadata_key(group.group_id),
                  records.group_metadata_value(group, {m.member_id: m.assignment for m in members}))
        self._prepare_rebalance(group, "downgraded from the consumer protocol")
        return [record]

    def _member_error(self, group_id, member_id, instance_id, generation_id) -> ErrorCode:
        if not group_id:
            return ErrorCode.INVALID_GROUP_ID
        if error := self.coordinator_error(group_id):
            return error
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        return _check_member(group, member_id, instance_id, generation_id)

    def sync_group(self, group_id: str, generation_id: int, member_id: str, instance_id: str | None,
                   protocol_type: str | None, protocol_name: str | None, assignments: dict[str, bytes]) -> asyncio.Future:
        """A future SyncGroupResult; the leader's call carries every member's assignment."""
        if (group := self._consumer_group(group_id)) is not None:
            return _answered(self.consumer.classic_sync(group, member_id, instance_id, generation_id, protocol_type,
                                                        protocol_name))
        error = self._member_error(group_id, member_id, instance_id, generation_id)
        if error != ErrorCode.NONE:
            return _answered(SyncGroupResult(error))
        group = self.groups[group_id]
        if (protocol_type is not None and protocol_type != group.protocol_type) or (
            protocol_name is not None and protocol_name != group.protocol_name
        ):
            return _answered(SyncGroupResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL))
        if group.is_in(PREPARING):
            return _answered(SyncGroupResult(ErrorCode.REBALANCE_IN_PROGRESS))
        member = group.members[member_id]
        self._synced(group, member_id)
        if group.is_in(STABLE):
            self._schedule_session_timeout(group, member)
            return _answered(SyncGroupResult(ErrorCode.NONE, group.protocol_type, group.protocol_name, member.assignment))
        future = asyncio.get_running_loop().create_future()
        group.await_sync(member, future)
        if group.is_leader(member_id):
            self._complete_sync(group, assignments)
        return future

    def _synced(self, group: GroupMetadata, member_id: str) -> None:
        group.pending_sync.discard(member_id)
        if not group.pending_sync:
            _cancel(group.sync_timer)
            group.sync_timer = None

    def _complete_sync(self, group: GroupMetadata, assignments: dict[str, bytes]) -> None:
        """The leader's assignment: persist it, hand it out, and the group is Stable."""
        assignment = {member_id: assignments.get(member_id, b"") for member_id in group.members}
        error = self.manager.store_group(group, assignment)
        if error != ErrorCode.NONE:
            self._propagate_assignment_error(group, error)
            self._maybe_prepare_rebalance(group, f"could not store the assignment ({error.name})")
            return
        for member in group.members.values():
            member.assignment = assignment[member.member_id]
        group.transition_to(STABLE)
        self._propagate_assignment(group, ErrorCode.NONE)
        log.info("group %s generation %d is stable", group.group_id, group.generation_id)

    def heartbeat(self, group_id: str, member_id: str, instance_id: str | None, generation_id: int) -> ErrorCode:
        if (group := self._consumer_group(group_id)) is not None:
            return self.consumer.classic_heartbeat(group, member_id, instance_id, generation_id)
        error = self._member_error(group_id, member_id, instance_id, generation_id)
        if error != ErrorCode.NONE:
            return error
        group = self.groups[group_id]
        self._schedule_session_timeout(group, group.members[member_id])
        return ErrorCode.REBALANCE_IN_PROGRESS if group.is_in(PREPARING) else ErrorCode.NONE

    def leave_group(self, group_id: str, leaving: list[tuple[str, str | None]]) -> tuple[ErrorCode, list[ErrorCode]]:
        """(group error, one error per (member id, instance id)); an empty member id names a static member."""
        if not group_id:
            return ErrorCode.INVALID_GROUP_ID, []
        if error := self.coordinator_error(group_id):
            return error, []
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.NONE, [ErrorCode.UNKNOWN_MEMBER_ID] * len(leaving)
        if group.consumer is not None:
            return ErrorCode.NONE, [self.consumer.classic_leave(group, m, i) for m, i in leaving]
        return ErrorCode.NONE, [self._leave(group, member_id, instance_id) for member_id, instance_id in leaving]

    def _leave(self, group: GroupMetadata, member_id: str, instance_id: str | None) -> ErrorCode:
        if member_id == UNKNOWN_MEMBER_ID:
            # an administrator removing a static member by its group.instance.id
            member_id = group.static_members.get(instance_id) if instance_id is not None else None
        elif member_id in group.pending_members:
            group.pending_members.pop(member_id).cancel()
            self._try_complete_join(group)
            return ErrorCode.NONE
        elif group.is_static_member_fenced(instance_id, member_id):
            return ErrorCode.FENCED_INSTANCE_ID
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        log.info("member %s left group %s", member_id, group.group_id)
        self._remove_member(group, member)
        return ErrorCode.NONE

    # ---- member liveness ----------------------------------------------------------------

    def _schedule_session_timeout(self, group: GroupMetadata, member: MemberMetadata, timeout_ms: int | None = None) -> None:
        member.cancel_session_timer()
        timeout_ms = member.session_timeout_ms if timeout_ms is None else timeout_ms
        member.session_timer = clock.call_later(timeout_ms / 1000, self._on_session_expired, group, member)

    def _on_session_expired(self, group: GroupMetadata, member: MemberMetadata) -> None:
        member.session_timer = None
        if group.members.get(member.member_id) is not member:
            return
        if not member.is_new and (member.join_future is not None or member.sync_future is not None):
            return  # waiting on a rebalance counts as alive; its timer is re-armed when that completes
        log.info("member %s of group %s timed out; removing it", member.member_id, group.group_id)
        self._remove_member(group, member)

    def _on_pending_member_expired(self, group: GroupMetadata, member_id: str) -> None:
        if group.pending_members.pop(member_id, None) is not None:
            self._try_complete_join(group)

    def _remove_member(self, group: GroupMetadata, member: MemberMetadata) -> None:
        group.remove(member.member_id)
        if group.is_in(PREPARING):
            self._try_complete_join(group)
        else:
            self._maybe_prepare_rebalance(group, f"member {member.member_id} left")

    # ---- offsets ------------------------------------------------------------------------

    def commit_offsets(self, group_id: str, member_id: str, instance_id: str | None, generation_id: int,
                       offsets: dict[TopicPartition, CommittedOffset]) -> PendingResults:
        """Generation -1 with no member id is a simple commit, allowed while the group is Empty.
        Answered once the commit is committed (acks=all), which is also when it takes effect.

        An unknown group with a generation is GROUP_ID_NOT_FOUND (older versions say ILLEGAL_GENERATION)."""
        if error := self.coordinator_error(group_id):
            return dict.fromkeys(offsets, error)
        group = self.groups.get(group_id)
        if group is None:
            if generation_id >= 0:
                return dict.fromkeys(offsets, ErrorCode.GROUP_ID_NOT_FOUND)
            group = self.groups[group_id] = GroupMetadata(group_id, clock.wall_ms())
        if group.consumer is not None:
            error = self.consumer.commit_error(group.consumer, member_id, generation_id)
        elif generation_id >= 0 or member_id != UNKNOWN_MEMBER_ID or instance_id is not None:
            error = _check_member(group, member_id, instance_id, generation_id)
        else:
            error = ErrorCode.NONE if group.is_in(EMPTY) else ErrorCode.UNKNOWN_MEMBER_ID
        if error == ErrorCode.NONE and group.is_in(COMPLETING):
            error = ErrorCode.REBALANCE_IN_PROGRESS  # it has this generation but not yet its assignment
        if error != ErrorCode.NONE:
            return dict.fromkeys(offsets, error)
        if member_id in group.members:
            self._schedule_session_timeout(group, group.members[member_id])
        return self._store(offsets, lambda valid: self.manager.store_offsets(group, valid))

    def commit_txn_offsets(self, group_id: str, producer_id: int, producer_epoch: int, member_id: str,
                           instance_id: str | None, generation_id: int,
                           offsets: dict[TopicPartition, CommittedOffset]) -> dict[TopicPartition, ErrorCode]:
        """TxnOffsetCommit: offsets that count once the producer's transaction commits.

        The member and generation are checked only when given (KIP-447), so a
        producer whose consumer is not in a group can commit too."""
        if error := self.coordinator_error(group_id):
            return dict.fromkeys(offsets, error)
        group = self.groups.get(group_id)
        if group is None:
            group = self.groups[group_id] = GroupMetadata(group_id, clock.wall_ms())
        if group.consumer is not None and (member_id != UNKNOWN_MEMBER_ID or generation_id >= 0):
            error = self.consumer.commit_error(group.consumer, member_id, generation_id)
            if error == ErrorCode.NONE:
                return self._store(offsets, lambda valid: self.manager.store_txn_offsets(
                    group, producer_id, producer_epoch, valid))
        elif group.is_static_member_fenced(instance_id, member_id):
            error = ErrorCode.FENCED_INSTANCE_ID
        elif member_id != UNKNOWN_MEMBER_ID and member_id not in group.members:
            error = ErrorCode.UNKNOWN_MEMBER_ID
        elif generation_id >= 0 and generation_id != group.generation_id:
            error = ErrorCode.ILLEGAL_GENERATION
        else:
            return self._store(offsets, lambda valid: self.manager.store_txn_offsets(
                group, producer_id, producer_epoch, valid))
        return dict.fromkeys(offsets, error)

    def _store(self, offsets: dict[TopicPartition, CommittedOffset],
               store: Callable[[dict[TopicPartition, CommittedOffset]], Pending]) -> PendingResults:
        """Store the offsets whose metadata fits offset.metadata.max.bytes; one error per partition,
        once ``store``'s answer is known."""
        limit = self.config["offset.metadata.max.bytes"]
        results = {tp: ErrorCode.OFFSET_METADATA_TOO_LARGE for tp, c in offsets.items() if len(c.metadata) > limit}
        valid = {tp: c for tp, c in offsets.items() if tp not in results}
        if not valid:
            return results
        return then(store(valid), lambda error: {**results, **dict.fromkeys(valid, error)})

    def offsets_partition(self, group_id: str) -> int:
        """The partition of __consumer_offsets that holds the group."""
        return self.manager.partition_for(group_id)

    def complete_txn_offsets(self, offsets_partition: int, producer_id: int, committed: bool) -> None:
        """The producer's marker landed in a partition of __consumer_offsets: its offsets
        there become the committed ones, or are dropped."""
        for group in self.groups.values():
            if producer_id in group.pending_txn_offsets and self.offsets_partition(group.group_id) == offsets_partition:
                group.complete_txn_offsets(producer_id, committed)

    def fetch_offsets(self, group_id: str, partitions: list[TopicPartition] | None, require_stable: bool
                      ) -> list[tuple[TopicPartition, CommittedOffset | None, ErrorCode]]:
        """(partition, committed offset or None, error); ``partitions`` None means all the group has."""
        group = self.groups.get(group_id)
        if partitions is None:  # all of them: answered as if each was named, so both forms agree
            if group is None:
                return []
            partitions = list(group.offsets)
            if require_stable:
                partitions += sorted({tp for staged in group.pending_txn_offsets.values() for tp in staged}
                                     .union(group.pending_offset_commits) - group.offsets.keys())
        out = []
        for tp in partitions:
            if group is not None and require_stable and group.has_pending_offsets(tp):
                out.append((tp, None, ErrorCode.UNSTABLE_OFFSET_COMMIT))
            else:
                out.append((tp, group.offsets.get(tp) if group else None, ErrorCode.NONE))
        return out

    def delete_offsets(self, group_id: str, partitions: list[TopicPartition]
                       ) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:
        """OffsetDelete: allowed for an Empty group, or for topics a consumer group does not subscribe to."""
        if error := self.coordinator_error(group_id):
            return error, {}
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.GROUP_ID_NOT_FOUND, {}
        if not group.is_empty() and group.protocol_type != CONSUMER_PROTOCOL_TYPE and group.consumer is None:
            return ErrorCode.NON_EMPTY_GROUP, {}
        if group.is_empty():
            in_use = set()
        elif group.consumer is not None:
            in_use = {tp for tp in partitions if tp[0] in group.consumer.subscription_metadata}
        else:
            in_use = {tp for tp in partitions if group.is_subscribed_to(tp[0])}
        deletable = [tp for tp in partitions if tp not in in_use]
        error = self.manager.remove(group, [tp for tp in deletable if tp in group.offsets], group_tombstone=False)
        results = dict.fromkeys(deletable, error)
        results.update(dict.fromkeys(in_use, ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC))
        return ErrorCode.NONE, results

    # ---- listing and deleting groups ----------------------------------------------------

    def delete_groups(self, group_ids: list[str]) -> dict[str, ErrorCode]:
        results = {}
        for group_id in group_ids:
            group = self.groups.get(group_id)
            if error := self.coordinator_error(group_id):
                results[group_id] = error
            elif group is None:
                results[group_id] = ErrorCode.GROUP_ID_NOT_FOUND
            elif not group.is_empty():
                results[group_id] = ErrorCode.NON_EMPTY_GROUP
            else:
                error = self.manager.remove(group, list(group.offsets), group_tombstone=True)
                if error == ErrorCode.NONE:
                    self._remove_group(group)
                    log.info("deleted group %s", group_id)
                results[group_id] = error
        return results

    def _remove_group(self, group: GroupMetadata) -> None:
        group.transition_to(GroupState.DEAD)
        for timer in (group.join_timer, group.sync_timer, *group.pending_members.values()):
            _cancel(timer)
        group.pending_members.clear()
        if group.consumer is not None:
            self.consumer.unloaded(group)
        del self.groups[group.group_id]

    # ---- offset retention -----------------------------------------------------------------

    def _check_retention(self) -> None:
        """Expire offsets past offsets.retention.minutes; an Empty group left with none is removed."""
        now = clock.wall_ms()
        retention_ms = self.config["offsets.retention.minutes"] * 60_000
        expired_total = 0
        for group in list(self.groups.values()):
            expired = group.expired_offsets(now, retention_ms)
            dead = (group.is_empty() and len(expired) == len(group.offsets)
                    and not group.pending_members and not group.pending_txn_offsets)
            if not (expired or dead):
                continue
            if self.manager.remove(group, expired, group_tombstone=dead) != ErrorCode.NONE:
                continue
            expired_total += len(expired)
            if dead:
                self._remove_group(group)
                log.info("group %s is empty and has no offsets left; removed it", group.group_id)
        if expired_total:
            log.info("removed %d expired offsets", expired_total)
