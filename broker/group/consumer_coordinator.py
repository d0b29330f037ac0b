"""ConsumerGroupCoordinator: KIP-848 consumer groups (ConsumerGroupHeartbeat, ConsumerGroupDescribe).

Lives beside the classic GroupCoordinator and shares its groups, partitions and
__consumer_offsets writer: a consumer group is a GroupMetadata (which keeps its
committed offsets as for any group) whose ``consumer`` holds a ConsumerGroup.

A heartbeat (Kafka's GroupMetadataManager.consumerGroupHeartbeat):
1. gets or creates the member (epoch 0 joins; a static member's instance id
   replaces the incarnation that left with epoch -2, keeping its assignment);
2. bumps the group epoch if the member's subscription changed, or the subscribed
   topics (names, regex matches, partition counts) did;
3. recomputes the target assignment when the group epoch is ahead of it;
4. moves the member one step toward its target (consumer_group.reconcile);
and is answered once the records of what changed are committed in the group's
partition. Session timeouts (no heartbeat) and rebalance timeouts (partitions not
revoked in time) fence the member: it is removed and the group epoch bumped.
"""

from __future__ import annotations

import logging
import re
import re._constants as re_constants  # the parser's own tree, to vet a pattern before it runs
import re._parser as re_parser
import uuid
from collections import Counter

from broker.coordinator.partitions import Pending, then
from broker.coordinator.record_fields import RecordFormatError
from broker.errors import ErrorCode
from storage import clock

from . import consumer_records as records
from .assignors import ASSIGNORS, Assignment, AssignmentSpec
from .consumer_group import (
    EMPTY_ASSIGNMENT,
    LEAVE_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    ConsumerGroup,
    ConsumerMember,
    Current,
    MemberState,
    reconcile,
)
from .consumer_protocol import encode_assignment, parse_assignment, parse_subscription
from .coordinator_records import assigned_topics
from .metadata import (
    CONSUMER_PROTOCOL_TYPE,
    GroupMetadata,
    JoinGroupResult,
    MemberMetadata,
    SyncGroupResult,
)

log = logging.getLogger("moldau.group")


class HeartbeatError(Exception):
    def __init__(self, error: ErrorCode, message: str | None = None):
        super().__init__(message)
        self.error, self.message = error, message


class ConsumerGroupCoordinator:
    def __init__(self, coordinator) -> None:
        self.coordinator = coordinator  # the GroupCoordinator: its groups, partitions and manager
        self.config = coordinator.config
        self.group_configs = coordinator.group_configs
        self.logs = coordinator.manager.logs

    @property
    def assignors(self) -> list[str]:
        return [n.strip() for n in self.config["group.consumer.assignors"].split(",")]

    # ---- ConsumerGroupHeartbeat ---------------------------------------------------

    def heartbeat(self, request: dict, version: int, client_id: str, client_host: str) -> dict | Pending:
        """The response, or an awaitable of it once what changed is committed."""
        try:
            _check_request(request, version, self.assignors)
            group_id = request["group_id"]
            if error := self.coordinator.coordinator_error(group_id):
                raise HeartbeatError(error)
            if request["member_epoch"] in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
                response, batch = self._leave(request)
            else:
                response, batch = self._heartbeat(request, client_id, client_host)
        except HeartbeatError as exc:
            return _error_response(exc.error, exc.message)
        if not batch:
            return response
        error = self.coordinator.manager.store_records(group_id, batch)
        return then(self.coordinator.committed(group_id, error),
                    lambda e: response if e == ErrorCode.NONE else _error_response(e))

    def _heartbeat(self, request: dict, client_id: str, client_host: str) -> tuple[dict, list]:
        group_id, epoch = request["group_id"], request["member_epoch"]
        holder, batch = self._group(group_id, create=epoch == 0)
        group: ConsumerGroup = holder.consumer
        member, old = self._member(group_id, group, request, batch)
        member.client_id, member.client_host = client_id, client_host
        for field in ("instance_id", "rack_id", "server_assignor"):
            if request[field] is not None:
                setattr(member, field, request[field])
        if request["rebalance_timeout_ms"] != -1:
            member.rebalance_timeout_ms = request["rebalance_timeout_ms"]
        if request["subscribed_topic_names"] is not None:
            member.subscribed_topic_names = tuple(sorted(set(request["subscribed_topic_names"])))
        if request.get("subscribed_topic_regex") is not None:
            member.subscribed_topic_regex = request["subscribed_topic_regex"] or None
        member.classic_session_timeout_ms = member.classic_protocols = None
        assigned_before = member.assigned
        owned = None if request["topic_partitions"] is None else records.assignment_of(request["topic_partitions"])
        self._update(holder, member, old, owned, batch)
        response = {
            "throttle_time_ms": 0, "error_code": 0, "error_message": None, "member_id": member.member_id,
            "member_epoch": member.member_epoch,
            "heartbeat_interval_ms": self.group_configs.value(group_id, "consumer.heartbeat.interval.ms"),
            "assignment": None,
        }
        full = epoch == 0 or (request["rebalance_timeout_ms"] != -1 and request["subscribed_topic_names"] is not None
                              and request["topic_partitions"] is not None)
        if full or member.assigned != assigned_before:
            response["assignment"] = {"topic_partitions": records.wire(member.assigned)}
        return response, batch

    def _update(self, holder: GroupMetadata, member: ConsumerMember, old: tuple | None, owned: Assignment | None,
                batch: list) -> None:
        """Steps 2-4 of a heartbeat (or a classic member's JoinGroup) once the member's fields are updated:
        ``old`` is its (metadata, subscription) before, None if it is new."""
        group_id, group = holder.group_id, holder.consumer
        if old is None or member.metadata() != old[0]:
            batch.append(records.member_metadata(group_id, member))
        bump = old is None and member.member_id not in group.members or old is not None and member.subscription() != old[1]
        group.add(member)
        metadata = self._subscription_metadata(group)
        if bump or metadata != group.subscription_metadata:
            group.subscription_metadata = metadata
            group.group_epoch += 1
            batch.append(records.group_epoch(group_id, group.group_epoch))
            log.info("group %s: epoch %d", group_id, group.group_epoch)
        if group.group_epoch > group.assignment_epoch:
            self._assign(group_id, group, batch)
        self._reconcile(group_id, group, member, owned, batch)
        self._schedule_session_timeout(holder, member)

    def _group(self, group_id: str, create: bool) -> tuple[GroupMetadata, list]:
        """The group (created or converted from an empty classic group if ``create``) and the records
        that conversion writes."""
        holder = self.coordinator.groups.get(group_id)
        batch: list = []
        if holder is not None and holder.consumer is not None:
            return holder, batch
        if holder is not None and not holder.is_empty() and create:
            self._upgrade(holder, batch)
            return holder, batch
        if not create:
            raise HeartbeatError(ErrorCode.UNKNOWN_MEMBER_ID)
        if holder is None:
            holder = self.coordinator.groups[group_id] = GroupMetadata(group_id, clock.wall_ms())
        elif holder.generation_id or holder.protocol_type:
            batch.extend(self.coordinator.manager.classic_group_tombstone(group_id))
        holder.consumer = ConsumerGroup()
        return holder, batch

    def _member(self, group_id: str, group: ConsumerGroup, request: dict, batch: list
                ) -> tuple[ConsumerMember, tuple | None]:
        """(the member to update, its (metadata, subscription) before this heartbeat or None if new)."""
        member_id, epoch, instance_id = request["member_id"] or str(uuid.uuid4()), request["member_epoch"], request["instance_id"]
        owned = request["topic_partitions"]
        existing = group.members.get(member_id)
        if instance_id is not None:
            static = group.members.get(group.static_members.get(instance_id, ""))
            if epoch == 0 and static is not None and static.member_id != member_id:
                if static.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                    raise HeartbeatError(ErrorCode.UNRELEASED_INSTANCE_ID,
                                         f"instance id {instance_id} is in use by member {static.member_id}")
                return self._replace_static(group_id, group, static, member_id, batch), None
            if epoch != 0 and (static is None or static.member_id != member_id):
                raise HeartbeatError(ErrorCode.UNKNOWN_MEMBER_ID if static is None else ErrorCode.FENCED_INSTANCE_ID)
        if len(group.members) >= self.config["group.consumer.max.size"] and existing is None:
            raise HeartbeatError(ErrorCode.GROUP_MAX_SIZE_REACHED)
        if existing is None:
            if epoch != 0:
                raise HeartbeatError(ErrorCode.UNKNOWN_MEMBER_ID)
            log.info("group %s: member %s joins (consumer protocol)", group_id, member_id)
            return ConsumerMember(member_id), None
        before = (existing.metadata(), existing.subscription())
        if epoch == 0:
            # it rejoins holding nothing: it starts over toward its target, which stands
            existing.set_current(Current(0, 0, MemberState.STABLE, EMPTY_ASSIGNMENT, EMPTY_ASSIGNMENT))
            return existing, before
        if epoch > existing.member_epoch or epoch < existing.member_epoch and not (
                epoch == existing.previous_member_epoch and owned is not None
                and records.assignment_of(owned) <= existing.assigned):
            raise HeartbeatError(ErrorCode.FENCED_MEMBER_EPOCH,
                                 f"member epoch {epoch}, the coordinator's is {existing.member_epoch}")
        return existing, before

    def _replace_static(self, group_id: str, group: ConsumerGroup, old: ConsumerMember, member_id: str,
                        batch: list) -> ConsumerMember:
        """A static member back within its session timeout: the new incarnation takes over the old one's
        assignment and target, so nothing moves."""
        log.info("group %s: static member %s rejoins as %s (was %s)", group_id, old.instance_id, member_id,
                 old.member_id)
        target = group.target.get(old.member_id, EMPTY_ASSIGNMENT)
        group.remove(old.member_id)
        batch.extend(records.member_tombstones(group_id, old.member_id))
        new = ConsumerMember(member_id, old.instance_id, old.rack_id, old.client_id, old.client_host,
                             old.subscribed_topic_names, old.subscribed_topic_regex, old.rebalance_timeout_ms,
                             old.server_assignor, 0, 0, MemberState.STABLE, old.assigned, EMPTY_ASSIGNMENT)
        group.add(new)
        group.target[member_id] = target
        batch.append(records.member_metadata(group_id, new))
        batch.append(records.target_assignment(group_id, member_id, target))
        batch.append(records.current_assignment(group_id, new))
        return new

    def _subscription_metadata(self, group: ConsumerGroup) -> dict[str, tuple[uuid.UUID, int]]:
        names = self._subscribed_topics(group)
        out = {}
        for name in sorted(names):
            topic = self.logs.topic(name)
            if topic is not None:
                out[name] = (topic.topic_id, topic.num_partitions)
        return out

    def _subscribed_topics(self, group: ConsumerGroup, member: ConsumerMember | None = None) -> set[str]:
        """The topics the group's members (or one member) subscribe to, by name or by regex."""
        members = group.members.values() if member is None else [member]
        names = {n for m in members for n in m.subscribed_topic_names}
        patterns = {m.subscribed_topic_regex for m in members if m.subscribed_topic_regex}
        for pattern in patterns:
            try:
                names |= _matching(pattern, self.logs.topics)
            except HeartbeatError:  # a stored regex this broker refuses (written by another): matches nothing
                continue
        return names

    def _assignor(self, group: ConsumerGroup) -> str:
        """The assignor most members name, else the first of group.consumer.assignors."""
        votes = Counter(m.server_assignor for m in group.members.values() if m.server_assignor)
        return votes.most_common(1)[0][0] if votes else self.assignors[0]

    def _assign(self, group_id: str, group: ConsumerGroup, batch: list) -> None:
        """A new target assignment for the group epoch; the members whose target changed are written."""
        name = self._assignor(group)
        spec = AssignmentSpec(group.subscription_metadata,
                              {m.member_id: self._subscribed_topics(group, m) & group.subscription_metadata.keys()
                               for m in group.members.values()},
                              group.target)
        target = ASSIGNORS[name](spec)
        for member_id, assignment in target.items():
            if group.target.get(member_id) != assignment:
                batch.append(records.target_assignment(group_id, member_id, assignment))
        group.target = dict(target)
        group.assignment_epoch = group.group_epoch
        batch.append(records.assignment_epoch(group_id, group.assignment_epoch))
        log.info("group %s: target assignment of epoch %d computed by %s", group_id, group.assignment_epoch, name)

    def _reconcile(self, group_id: str, group: ConsumerGroup, member: ConsumerMember, owned: Assignment | None,
                   batch: list) -> None:
        if member.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH or (
                member.state == MemberState.STABLE and member.member_epoch == group.assignment_epoch):
            return  # (most heartbeats: nothing to move, no need to look at who holds what)
        current = reconcile(member, group.assignment_epoch, group.target.get(member.member_id, EMPTY_ASSIGNMENT),
                            group.owners(), owned)
        if current == member.current():
            return
        member.set_current(current)
        batch.append(records.current_assignment(group_id, member))
        if member.rebalance_timer is not None:
            member.rebalance_timer.cancel()
            member.rebalance_timer = None
        if member.state == MemberState.UNREVOKED_PARTITIONS:
            member.rebalance_timer = clock.call_later(max(member.rebalance_timeout_ms, 0) / 1000,
                                                      self._on_rebalance_timeout, group_id, member, member.member_epoch)

    # ---- leaving and fencing ---------------------------------------------------------

    def _leave(self, request: dict) -> tuple[dict, list]:
        group_id, member_id, epoch, instance_id = (request["group_id"], request["member_id"], request["member_epoch"],
                                                   request["instance_id"])
        holder = self.coordinator.groups.get(group_id)
        group = holder.consumer if holder is not None else None
        if group is None:
            raise HeartbeatError(ErrorCode.UNKNOWN_MEMBER_ID)
        if instance_id is not None:
            member = group.members.get(group.static_members.get(instance_id, ""))
            if member is None:
                raise HeartbeatError(ErrorCode.UNKNOWN_MEMBER_ID)
            if member.member_id != member_id:
                raise HeartbeatError(ErrorCode.FENCED_INSTANCE_ID)
        else:
            member = group.members.get(member_id)
            if member is None:
                raise HeartbeatError(ErrorCode.UNKNOWN_MEMBER_ID)
        response = {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "member_id": member_id,
                    "member_epoch": epoch, "heartbeat_interval_ms": 0, "assignment": None}
        if epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            # away for now: its partitions wait for it until its session times out
            log.info("group %s: static member %s (%s) left for now", group_id, member_id, instance_id)
            member.set_current(Current(LEAVE_GROUP_STATIC_MEMBER_EPOCH, member.previous_member_epoch, member.state,
                                       member.assigned, EMPTY_ASSIGNMENT))
            return response, [records.current_assignment(group_id, member)]
        log.info("group %s: member %s left", group_id, member_id)
        return response, self._fence(group_id, group, member)

    def _fence(self, group_id: str, group: ConsumerGroup, member: ConsumerMember) -> list:
        """Remove the member; the group epoch is bumped so its partitions are assigned anew."""
        group.remove(member.member_id)
        batch = records.member_tombstones(group_id, member.member_id)
        if group.members and all(m.classic_protocols is not None for m in group.members.values()):
            return batch + self._downgrade(self.coordinator.groups[group_id])
        group.subscription_metadata = self._subscription_metadata(group)
        group.group_epoch += 1
        batch.append(records.group_epoch(group_id, group.group_epoch))
        if group.members:
            self._assign(group_id, group, batch)
        return batch

    def _fence_later(self, group_id: str, member: ConsumerMember, reason: str) -> None:
        holder = self.coordinator.groups.get(group_id)
        group = holder.consumer if holder is not None else None
        if group is None or group.members.get(member.member_id) is not member:
            return
        log.info("group %s: member %s fenced: %s", group_id, member.member_id, reason)
        batch = self._fence(group_id, group, member)
        error = self.coordinator.manager.store_records(group_id, batch)
        if error != ErrorCode.NONE:
            log.warning("group %s: could not write the fencing of %s (%s)", group_id, member.member_id, error.name)

    def _schedule_session_timeout(self, holder: GroupMetadata, member: ConsumerMember) -> None:
        if member.session_timer is not None:
            member.session_timer.cancel()
        timeout = (member.classic_session_timeout_ms
                   or self.group_configs.value(holder.group_id, "consumer.session.timeout.ms"))
        member.session_timer = clock.call_later(timeout / 1000, self._on_session_timeout, holder.group_id, member)

    def _on_session_timeout(self, group_id: str, member: ConsumerMember) -> None:
        member.session_timer = None
        self._fence_later(group_id, member, "its session timed out")

    def _on_rebalance_timeout(self, group_id: str, member: ConsumerMember, epoch: int) -> None:
        member.rebalance_timer = None
        if member.member_epoch == epoch and member.state == MemberState.UNREVOKED_PARTITIONS:
            self._fence_later(group_id, member, f"it did not revoke its partitions within {member.rebalance_timeout_ms} ms")

    # ---- classic members: online upgrade and the JoinGroup/SyncGroup bridge ---------------

    def _upgrade(self, holder: GroupMetadata, batch: list) -> None:
        """A classic group with members, joined by a consumer-protocol member (Kafka 4's online upgrade): it
        becomes a consumer group at its generation, its members keep their assignments (the target, for now)
        and go on through JoinGroup, SyncGroup and Heartbeat."""
        group_id = holder.group_id
        if holder.protocol_type != CONSUMER_PROTOCOL_TYPE:
            raise HeartbeatError(ErrorCode.GROUP_ID_NOT_FOUND, f"group {group_id} is not a consumer group")
        try:
            # (no protocol chosen yet, a group's first rebalance: each member's preferred one)
            parsed = [(m, parse_subscription(m.metadata(holder.protocol_name or m.protocols[0][0])),
                       parse_assignment(m.assignment)) for m in holder.members.values()]
        except RecordFormatError:
            raise HeartbeatError(ErrorCode.GROUP_ID_NOT_FOUND,
                                 f"group {group_id}: a member's embedded consumer protocol is malformed") from None
        if len(parsed) >= self.config["group.consumer.max.size"]:
            raise HeartbeatError(ErrorCode.GROUP_MAX_SIZE_REACHED)
        generation = holder.generation_id
        self.coordinator.hand_over(holder)
        group = holder.consumer = ConsumerGroup()
        group.group_epoch = group.assignment_epoch = generation
        batch.extend(self.coordinator.manager.classic_group_tombstone(group_id))
        batch.append(records.group_epoch(group_id, generation))
        for m, subscription, assigned in parsed:
            member = ConsumerMember(
                m.member_id, m.group_instance_id, subscription.rack_id, m.client_id, m.client_host,
                tuple(sorted(set(subscription.topics))), None, m.rebalance_timeout_ms, None, generation, generation,
                MemberState.STABLE, self._ids(assigned), EMPTY_ASSIGNMENT, m.session_timeout_ms, list(m.protocols))
            group.add(member)
            group.target[member.member_id] = member.assigned
            batch += [records.member_metadata(group_id, member),
                      records.target_assignment(group_id, member.member_id, member.assigned),
                      records.current_assignment(group_id, member)]
            self._schedule_session_timeout(holder, member)
        batch.append(records.assignment_epoch(group_id, generation))
        group.subscription_metadata = self._subscription_metadata(group)
        log.info("group %s: upgraded from the classic protocol at generation %d with %d members", group_id,
                 generation, len(group.members))

    def _downgrade(self, holder: GroupMetadata) -> list:
        """The last consumer-protocol member left (Kafka 4's online downgrade): the group is a classic one
        again at its group epoch, each member with its target as assignment, and rebalances so they rejoin."""
        group, group_id = holder.consumer, holder.group_id
        batch = [r for member_id in group.members for r in records.member_tombstones(group_id, member_id)]
        batch += records.group_tombstones(group_id)
        members = [MemberMetadata(m.member_id, m.instance_id, m.client_id, m.client_host, m.rebalance_timeout_ms,
                                  m.classic_session_timeout_ms, CONSUMER_PROTOCOL_TYPE, list(m.classic_protocols),
                                  encode_assignment(self._names(group.target.get(m.member_id, EMPTY_ASSIGNMENT))))
                   for m in group.members.values()]
        self.unloaded(holder)
        holder.consumer = None
        log.info("group %s: downgraded to the classic protocol at generation %d with %d members", group_id,
                 group.group_epoch, len(members))
        return batch + self.coordinator.take_over(holder, group.group_epoch, members)

    def classic_join(self, holder: GroupMetadata, joining, require_known_member_id: bool):
        """A classic member's JoinGroup to a consumer group: a JoinGroupResult with its member epoch as the
        generation (once its records are committed); its partitions come with SyncGroup."""
        group, group_id = holder.consumer, holder.group_id
        if joining.protocol_type != CONSUMER_PROTOCOL_TYPE or not joining.protocols:
            return JoinGroupResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, joining.member_id)
        try:
            subscription = parse_subscription(joining.protocols[0][1])
        except RecordFormatError:
            return JoinGroupResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, joining.member_id)
        member_id, instance_id = joining.member_id, joining.group_instance_id
        if not member_id:
            member_id = f"{instance_id or joining.client_id}-{uuid.uuid4()}"
            if instance_id is None and require_known_member_id:
                return JoinGroupResult(ErrorCode.MEMBER_ID_REQUIRED, member_id)
        batch: list = []
        static = group.members.get(group.static_members.get(instance_id, "")) if instance_id is not None else None
        if static is not None and static.member_id != member_id:
            if joining.member_id:
                return JoinGroupResult(ErrorCode.FENCED_INSTANCE_ID, member_id)
            member, old = self._replace_static(group_id, group, static, member_id, batch), None
        else:
            member = group.members.get(member_id)
            if member is None and len(group.members) >= self.config["group.consumer.max.size"]:
                return JoinGroupResult(ErrorCode.GROUP_MAX_SIZE_REACHED, member_id)
            old = None if member is None else (member.metadata(), member.subscription())
            member = member or ConsumerMember(member_id)
        member.instance_id = instance_id
        member.rack_id = subscription.rack_id or member.rack_id
        member.client_id, member.client_host = joining.client_id, joining.client_host
        member.rebalance_timeout_ms = joining.rebalance_timeout_ms
        member.subscribed_topic_names, member.subscribed_topic_regex = tuple(sorted(set(subscription.topics))), None
        member.classic_session_timeout_ms, member.classic_protocols = joining.session_timeout_ms, list(joining.protocols)
        self._update(holder, member, old, self._ids(subscription.owned), batch)
        result = JoinGroupResult(ErrorCode.NONE, member_id, member.member_epoch, CONSUMER_PROTOCOL_TYPE,
                                 joining.protocols[0][0])
        error = self.coordinator.manager.store_records(group_id, batch)
        return then(self.coordinator.committed(group_id, error),
                    lambda e: result if e == ErrorCode.NONE else JoinGroupResult(e, member_id))

    def classic_sync(self, holder: GroupMetadata, member_id: str, instance_id: str | None, generation: int,
                     protocol_type: str | None, protocol_name: str | None) -> SyncGroupResult:
        member, error = self._classic_member(holder.consumer, member_id, instance_id)
        if error == ErrorCode.NONE and generation != member.member_epoch:
            error = ErrorCode.ILLEGAL_GENERATION
        if error != ErrorCode.NONE:
            return SyncGroupResult(error)
        name = member.classic_protocols[0][0]
        if protocol_type not in (None, CONSUMER_PROTOCOL_TYPE) or protocol_name not in (None, name):
            return SyncGroupResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        self._schedule_session_timeout(holder, member)
        return SyncGroupResult(ErrorCode.NONE, CONSUMER_PROTOCOL_TYPE, name,
                               encode_assignment(self._names(member.assigned)))

    def classic_heartbeat(self, holder: GroupMetadata, member_id: str, instance_id: str | None,
                          generation: int) -> ErrorCode:
        """REBALANCE_IN_PROGRESS tells a classic member to rejoin: the group moved on, or it has partitions
        to give up, or partitions it waited for are free now."""
        group = holder.consumer
        member, error = self._classic_member(group, member_id, instance_id)
        if error == ErrorCode.NONE and generation != member.member_epoch:
            error = ErrorCode.ILLEGAL_GENERATION
        if error != ErrorCode.NONE:
            return error
        self._schedule_session_timeout(holder, member)
        owners = group.owners()
        released = member.state == MemberState.UNRELEASED_PARTITIONS and any(
            tp not in owners for tp in group.target.get(member.member_id, EMPTY_ASSIGNMENT) - member.assigned)
        if member.member_epoch < group.group_epoch or member.state == MemberState.UNREVOKED_PARTITIONS or released:
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    def classic_leave(self, holder: GroupMetadata, member_id: str, instance_id: str | None) -> ErrorCode:
        """LeaveGroup of one classic member (or of a static member by instance id alone, an administrator's)."""
        group = holder.consumer
        if not member_id and instance_id is not None:
            member_id = group.static_members.get(instance_id, "")
        member, error = self._classic_member(group, member_id, instance_id, classic_only=False)
        if error != ErrorCode.NONE:
            return error
        log.info("group %s: member %s left (LeaveGroup)", holder.group_id, member_id)
        error = self.coordinator.manager.store_records(holder.group_id, self._fence(holder.group_id, group, member))
        return error

    @staticmethod
    def _classic_member(group: ConsumerGroup, member_id: str, instance_id: str | None, classic_only: bool = True
                        ) -> tuple[ConsumerMember | None, ErrorCode]:
        if instance_id is not None:
            member = group.members.get(group.static_members.get(instance_id, ""))
            if member is not None and member.member_id != member_id:
                return None, ErrorCode.FENCED_INSTANCE_ID
        else:
            member = group.members.get(member_id)
        if member is None or classic_only and member.classic_protocols is None:
            return None, ErrorCode.UNKNOWN_MEMBER_ID
        return member, ErrorCode.NONE

    def _ids(self, partitions: list[tuple[str, int]]) -> Assignment:
        """Topic names to ids; partitions of topics that no longer exist are left out."""
        out = set()
        for name, partition in partitions:
            topic = self.logs.topic(name)
            if topic is not None:
                out.add((topic.topic_id, partition))
        return frozenset(out)

    def _names(self, assignment: Assignment) -> list[tuple[str, int]]:
        out = []
        for topic_id, partition in assignment:
            topic = self.logs.topic_by_id(topic_id)
            if topic is not None:
                out.append((topic.name, partition))
        return out

    # ---- loading, unloading ------------------------------------------------------------

    def loaded(self, holder: GroupMetadata) -> None:
        """A group replayed from its partition: its members get a session timeout from now to find us."""
        group = holder.consumer
        group.subscription_metadata = assigned_topics(group.target.values(), self.logs)
        for member in group.members.values():
            self._schedule_session_timeout(holder, member)
            if member.state == MemberState.UNREVOKED_PARTITIONS:
                member.rebalance_timer = clock.call_later(max(member.rebalance_timeout_ms, 0) / 1000,
                                                          self._on_rebalance_timeout, holder.group_id, member,
                                                          member.member_epoch)

    @staticmethod
    def unloaded(holder: GroupMetadata) -> None:
        for member in holder.consumer.members.values():
            member.cancel_timers()

    # ---- offsets -------------------------------------------------------------------------

    @staticmethod
    def commit_error(group: ConsumerGroup, member_id: str, member_epoch: int) -> ErrorCode:
        """OffsetCommit (and TxnOffsetCommit, OffsetFetch with a member) to a consumer group: epoch -1 without
        a member only while it is empty; else the member's current epoch."""
        if member_epoch < 0 and not member_id and not group.members:
            return ErrorCode.NONE
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if member_epoch != member.member_epoch:
            return ErrorCode.STALE_MEMBER_EPOCH
        return ErrorCode.NONE

    # ---- ConsumerGroupDescribe -------------------------------------------------------------

    def describe(self, group_id: str) -> dict:
        if error := self.coordinator.coordinator_error(group_id):
            return _described(group_id, error)
        holder = self.coordinator.groups.get(group_id)
        if holder is None or holder.consumer is None:
            return _described(group_id, ErrorCode.GROUP_ID_NOT_FOUND,
                              None if holder is None else f"group {group_id} is not a consumer group")
        group = holder.consumer
        return {
            **_described(group_id, ErrorCode.NONE), "group_state": group.state(), "group_epoch": group.group_epoch,
            "assignment_epoch": group.assignment_epoch,
            "assignor_name": self._assignor(group),
            "members": [{
                "member_id": m.member_id, "instance_id": m.instance_id, "rack_id": m.rack_id,
                "member_epoch": m.member_epoch, "client_id": m.client_id, "client_host": m.client_host,
                "subscribed_topic_names": list(m.subscribed_topic_names),
                "subscribed_topic_regex": m.subscribed_topic_regex,
                "assignment": {"topic_partitions": self._named(m.assigned)},
                "target_assignment": {"topic_partitions": self._named(group.target.get(m.member_id, EMPTY_ASSIGNMENT))},
            } for m in group.members.values()],
        }

    @staticmethod
    def describe_error(group_id: str, error: ErrorCode) -> dict:
        return _described(group_id, error)

    def _named(self, assignment: Assignment) -> list[dict]:
        out = []
        for entry in records.wire(assignment):
            topic = self.logs.topic_by_id(entry["topic_id"])
            out.append({**entry, "topic_name": topic.name if topic else ""})
        return out


def _described(group_id: str, error: ErrorCode, message: str | None = None) -> dict:
    return {"error_code": error, "error_message": message, "group_id": group_id, "group_state": "Dead",
            "group_epoch": -1, "assignment_epoch": -1, "assignor_name": "", "members": [],
            "authorized_operations": -(1 << 31)}


def _check_request(request: dict, version: int, assignors: list[str]) -> None:
    """Kafka's validation of a ConsumerGroupHeartbeat (INVALID_REQUEST, UNSUPPORTED_ASSIGNOR)."""
    def invalid(message: str) -> HeartbeatError:
        return HeartbeatError(ErrorCode.INVALID_REQUEST, message)

    if not request["group_id"]:
        raise invalid("GroupId can't be empty.")
    if request["instance_id"] == "":
        raise invalid("InstanceId can't be empty.")
    if request["rack_id"] == "":
        raise invalid("RackId can't be empty.")
    epoch = request["member_epoch"]
    if version >= 1 and not request["member_id"]:
        raise invalid("MemberId can't be empty.")
    if epoch > 0 or epoch == LEAVE_GROUP_MEMBER_EPOCH:
        if not request["member_id"]:
            raise invalid("MemberId can't be empty.")
    elif epoch == 0:
        if request["rebalance_timeout_ms"] == -1:
            raise invalid("RebalanceTimeoutMs must be provided in first request.")
        if request["topic_partitions"] is None or request["topic_partitions"]:
            raise invalid("TopicPartitions must be empty when (re-)joining.")
        if not request["subscribed_topic_names"] and not request.get("subscribed_topic_regex"):
            raise invalid("SubscribedTopicNames or SubscribedTopicRegex must be set in first request.")
    elif epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
        if not request["member_id"] or request["instance_id"] is None:
            raise invalid("MemberId and InstanceId must be set to leave as a static member.")
    else:
        raise invalid("MemberEpoch is invalid.")
    if request["server_assignor"] is not None and request["server_assignor"] not in assignors:
        raise HeartbeatError(ErrorCode.UNSUPPORTED_ASSIGNOR,
                             f"ServerAssignor {request['server_assignor']} is not supported: {', '.join(assignors)}")
    if request.get("subscribed_topic_regex"):
        _compile(request["subscribed_topic_regex"])


_REGEXES: dict[str, re.Pattern] = {}


def _compile(pattern: str) -> re.Pattern:
    """A subscription regex (KIP-848's are RE2). Python's `re` agrees on RE2's syntax but backtracks, so
    what RE2 lacks (backreferences, lookaround) and what could make matching a topic name explode
    (alternatives or a repeat inside a repeat, more than MAX_REPEATS repeats) are refused as
    INVALID_REGULAR_EXPRESSION: a topic name must never stall the broker."""
    regex = _REGEXES.get(pattern)
    if regex is None:
        try:
            if _repeats(re_parser.parse(pattern).data, inside_repeat=False) > MAX_REPEATS:
                raise re.error(f"more than {MAX_REPEATS} repeats")
            regex = re.compile(pattern)
        except (re.error, RecursionError) as exc:
            raise HeartbeatError(ErrorCode.INVALID_REGULAR_EXPRESSION, f"{pattern}: {exc}") from None
        if len(_REGEXES) > 1000:
            _REGEXES.clear()
        _REGEXES[pattern] = regex
    return regex


_MATCHES: dict[str, dict[str, bool]] = {}  # pattern -> {topic name: matches}: each name is matched once


def _matching(pattern: str, topics) -> set[str]:
    """The topics (internal ones left out) the pattern matches."""
    known = _MATCHES.get(pattern)
    if known is None:
        if len(_MATCHES) > 1000:
            _MATCHES.clear()
        known = _MATCHES[pattern] = {}
    out = set()
    for topic in topics:
        match = known.get(topic)
        if match is None:
            match = known[topic] = not topic.startswith("__") and _compile(pattern).fullmatch(topic) is not None
        if match:
            out.add(topic)
    return out


MAX_REPEATS = 3  # a backtracking match of n repeats costs up to (topic name length)^n steps
_UNSUPPORTED = {re_constants.GROUPREF, re_constants.GROUPREF_EXISTS, re_constants.ASSERT, re_constants.ASSERT_NOT}
_REPEATS = {re_constants.MAX_REPEAT, re_constants.MIN_REPEAT, re_constants.POSSESSIVE_REPEAT}


def _repeats(items, inside_repeat: bool) -> int:
    """How many unbounded-ish repeats the parsed pattern has; re.error for what is refused."""
    count = 0
    for op, arg in items:
        if op in _UNSUPPORTED:
            raise re.error("backreferences and lookaround are not RE2")
        if op in _REPEATS:
            _, high, body = arg
            if inside_repeat and high > 1:
                raise re.error("a repeat inside a repeat")
            count += (high > 1) + _repeats(body, inside_repeat or high > 1)
        elif op == re_constants.BRANCH:
            if inside_repeat:
                raise re.error("alternatives inside a repeat")
            count += sum(_repeats(branch, inside_repeat) for branch in arg[1])
        elif op == re_constants.SUBPATTERN:
            count += _repeats(arg[-1], inside_repeat)
        elif op == re_constants.ATOMIC_GROUP:
            count += _repeats(arg, inside_repeat)
    return count


def _error_response(error: ErrorCode, message: str | None = None) -> dict:
    return {"throttle_time_ms": 0, "error_code": error, "error_message": message, "member_id": None,
            "member_epoch": -1, "heartbeat_interval_ms": 0, "assignment": None}

