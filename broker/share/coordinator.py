"""ShareGroupCoordinator: membership and assignment of share groups (ShareGroupHeartbeat, ShareGroupDescribe).

A share group has no revocation step (KIP-932): members may share partitions, so
a member is simply given its share of the target assignment, and its epoch is the
group epoch the assignment was computed at. The group epoch moves when a member
joins, leaves or is fenced (no heartbeat for group.share.session.timeout.ms), or
when a subscription or a subscribed topic's partition count changes.

Membership is kept in memory: after a coordinator restart a member's heartbeat
answers UNKNOWN_MEMBER_ID and the client joins again (epoch 0); what must survive --
which records are done -- is the share-partition state (persister.py). A group
with no members still exists while it has such state (ListGroups: Empty).
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field

from storage import clock
from broker.errors import ErrorCode

from . import assignor

log = logging.getLogger("moldau.share")

LEAVE_GROUP_EPOCH = -1
MAX_MEMBER_ID = 36  # Kafka refuses a longer one (a UUID in its longest string form)


@dataclass
class ShareMember:
    member_id: str
    member_epoch: int = 0
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed: tuple[str, ...] = ()
    assignment: frozenset = frozenset()
    deadline_ms: int = 0


@dataclass
class ShareGroup:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ShareMember] = field(default_factory=dict)
    partition_counts: dict[str, tuple[uuid.UUID, int]] = field(default_factory=dict)

    def state(self) -> str:
        return "Stable" if self.members else "Empty"


class ShareGroupCoordinator:
    def __init__(self, broker) -> None:
        self.broker = broker
        self.config = broker.config
        self.groups: dict[str, ShareGroup] = {}

    # ---- ShareGroupHeartbeat ---------------------------------------------------------

    def heartbeat(self, request: dict, client_id: str, client_host: str) -> dict:
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
            if group is not None and member_id in group.members:
                self._remove(group, member_id, "left")
            return _response(member_id, LEAVE_GROUP_EPOCH, 0, None)
        if epoch == 0 and request["subscribed_topic_names"] is None:
            return _error(ErrorCode.INVALID_REQUEST, "SubscribedTopicNames is required when joining")
        member = group.members.get(member_id) if group is not None else None
        if member is None:
            if epoch != 0:
                return _error(ErrorCode.UNKNOWN_MEMBER_ID, f"member {member_id} is not in group {group_id}")
            if group is None:
                if len(self.groups) >= self.config["group.share.max.groups"]:
                    return _error(ErrorCode.GROUP_MAX_SIZE_REACHED, "group.share.max.groups reached")
                group = self.groups[group_id] = ShareGroup(group_id)
            if len(group.members) >= self.config["group.share.max.size"]:
                return _error(ErrorCode.GROUP_MAX_SIZE_REACHED, f"group {group_id} has group.share.max.size members")
            member = group.members[member_id] = ShareMember(member_id)
            group.group_epoch += 1
            log.info("share group %s: member %s joined (epoch %d)", group_id, member_id, group.group_epoch)
        elif epoch > member.member_epoch:
            return _error(ErrorCode.FENCED_MEMBER_EPOCH, f"epoch {epoch} is ahead of the member's")
        member.client_id, member.client_host = client_id, client_host
        member.deadline_ms = clock.wall_ms() + self.broker.share.group_config(group_id, "share.session.timeout.ms")
        if request["rack_id"] is not None:
            member.rack_id = request["rack_id"]
        if request["subscribed_topic_names"] is not None:
            subscribed = tuple(sorted(set(request["subscribed_topic_names"])))
            if subscribed != member.subscribed:
                member.subscribed = subscribed
                group.group_epoch += 1
        self._refresh(group)
        before = member.member_epoch
        member.member_epoch = group.assignment_epoch
        full = epoch == 0 or before != member.member_epoch
        return _response(member_id, member.member_epoch,
                         self.broker.share.group_config(group_id, "share.heartbeat.interval.ms"),
                         member.assignment if full else None)

    def _refresh(self, group: ShareGroup) -> None:
        """Bump the group epoch if a subscribed topic changed; recompute the target if the epoch moved."""
        names = {name for m in group.members.values() for name in m.subscribed}
        counts = {}
        for name in names:
            topic = self.broker.logs.topic(name)
            if topic is not None:
                counts[name] = (topic.topic_id, topic.num_partitions)
        if counts != group.partition_counts:
            group.partition_counts = counts
            group.group_epoch += 1
        if group.assignment_epoch != group.group_epoch:
            target = assignor.assign({m.member_id: m.subscribed for m in group.members.values()}, counts)
            for member_id, assigned in target.items():
                group.members[member_id].assignment = assigned
            group.assignment_epoch = group.group_epoch

    def _remove(self, group: ShareGroup, member_id: str, why: str) -> None:
        del group.members[member_id]
        group.group_epoch += 1
        self._refresh(group)  # (its records stay acquired until its share session closes or their locks run out)
        log.info("share group %s: member %s %s (epoch %d)", group.group_id, member_id, why, group.group_epoch)

    def expire_members(self, now: int) -> None:
        """Fence the members whose session timed out (no heartbeat for group.share.session.timeout.ms)."""
        for group in list(self.groups.values()):
            for member in [m for m in group.members.values() if m.deadline_ms <= now]:
                self._remove(group, member.member_id, "fenced: session timed out")

    # ---- what the group tools see -----------------------------------------------------

    def group_ids(self) -> set[str]:
        """Every share group this coordinator knows: with members, or with durable share-partition state."""
        ids = set(self.groups) | self.broker.share.persister.groups()
        return {g for g in ids if self.broker.groups.coordinator_error(g) == ErrorCode.NONE}

    def state(self, group_id: str) -> str:
        group = self.groups.get(group_id)
        return group.state() if group is not None else "Empty"

    def describe(self, group_id: str) -> dict:
        if error := self.broker.groups.coordinator_error(group_id):
            return describe_error(group_id, error)
        group = self.groups.get(group_id)
        if group is None and group_id not in self.broker.share.persister.groups():
            return describe_error(group_id, ErrorCode.GROUP_ID_NOT_FOUND, f"group {group_id} is not a share group")
        group = group or ShareGroup(group_id)
        names = {topic_id: name for name, (topic_id, _) in group.partition_counts.items()}
        members = []
        for m in group.members.values():
            by_topic: dict[uuid.UUID, list[int]] = {}
            for topic_id, p in m.assignment:
                by_topic.setdefault(topic_id, []).append(p)
            members.append({
                "member_id": m.member_id, "rack_id": m.rack_id, "member_epoch": m.member_epoch,
                "client_id": m.client_id, "client_host": m.client_host, "subscribed_topic_names": list(m.subscribed),
                "assignment": {"topic_partitions": [{"topic_id": t, "topic_name": names.get(t, ""),
                                                     "partitions": sorted(ps)} for t, ps in by_topic.items()]},
            })
        return {"error_code": 0, "error_message": None, "group_id": group_id, "group_state": group.state(),
                "group_epoch": group.group_epoch, "assignment_epoch": group.assignment_epoch,
                "assignor_name": "simple", "members": members, "authorized_operations": -(2**31)}

    def members(self, group_id: str) -> int:
        group = self.groups.get(group_id)
        return len(group.members) if group is not None else 0

    async def delete(self, group_id: str) -> ErrorCode:
        """DeleteGroups of a share group: only an empty one; its share-partition state goes with it."""
        group = self.groups.get(group_id)
        if group is not None and group.members:
            return ErrorCode.NON_EMPTY_GROUP
        self.groups.pop(group_id, None)
        return await self.broker.share.partitions.delete_group(group_id)


def describe_error(group_id: str, error: ErrorCode, message: str | None = None) -> dict:
    return {"error_code": error, "error_message": message, "group_id": group_id, "group_state": "",
            "group_epoch": -1, "assignment_epoch": -1, "assignor_name": "", "members": [],
            "authorized_operations": -(2**31)}


def _error(error: ErrorCode, message: str | None = None) -> dict:
    return {"throttle_time_ms": 0, "error_code": error, "error_message": message, "member_id": None,
            "member_epoch": -1, "heartbeat_interval_ms": 0, "assignment": None}


def _response(member_id: str, epoch: int, interval_ms: int, assignment) -> dict:
    wire = None
    if assignment is not None:
        by_topic: dict[uuid.UUID, list[int]] = {}
        for topic_id, p in assignment:
            by_topic.setdefault(topic_id, []).append(p)
        wire = {"topic_partitions": [{"topic_id": t, "partitions": sorted(ps)} for t, ps in by_topic.items()]}
    return {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "member_id": member_id,
            "member_epoch": epoch, "heartbeat_interval_ms": interval_ms, "assignment": wire}
