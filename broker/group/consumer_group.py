"""ConsumerGroup and ConsumerMember: the state of one KIP-848 consumer group (group.protocol=consumer).

The group epoch counts changes of membership, subscriptions and the subscribed
topics' partitions. When it passes the assignment epoch, the assignor computes a
new target assignment (the assignment epoch becomes the group epoch). Each member
then moves toward its target on its own heartbeats (``reconcile``): partitions it
must give up are revoked first (it keeps its epoch until its heartbeat no longer
lists them), and a partition is given only once no other member holds it; the
member takes the target's epoch when it has no revocation outstanding.

Group states (ConsumerGroupDescribe, ListGroups): Empty (no members), Assigning
(group epoch ahead of the assignment epoch), Reconciling (some member not yet at
the assignment epoch), Stable.

Pure state; decided and persisted by the ConsumerGroupCoordinator.
"""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from enum import IntEnum
from typing import NamedTuple

from .assignors import Assignment, TopicIdPartition

LEAVE_GROUP_MEMBER_EPOCH = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2
EMPTY_ASSIGNMENT: Assignment = frozenset()


class MemberState(IntEnum):
    """Kafka's MemberState, as stored in ConsumerGroupCurrentMemberAssignmentValue."""
    STABLE = 0
    UNREVOKED_PARTITIONS = 1
    UNRELEASED_PARTITIONS = 2
    UNKNOWN = 127


@dataclasses.dataclass(eq=False)
class ConsumerMember:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    rebalance_timeout_ms: int = -1
    server_assignor: str | None = None
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: MemberState = MemberState.STABLE
    assigned: Assignment = EMPTY_ASSIGNMENT
    pending_revocation: Assignment = EMPTY_ASSIGNMENT
    # a classic member (JoinGroup/SyncGroup through the bridge of an upgraded group): its session timeout and
    # its protocols [(name, metadata)]; None for a member of the consumer protocol
    classic_session_timeout_ms: int | None = None
    classic_protocols: list | None = None
    session_timer: asyncio.TimerHandle | None = None
    rebalance_timer: asyncio.TimerHandle | None = None

    def subscription(self) -> tuple:
        return self.subscribed_topic_names, self.subscribed_topic_regex

    def metadata(self) -> tuple:
        """What ConsumerGroupMemberMetadataValue stores: a change is written."""
        return (self.instance_id, self.rack_id, self.client_id, self.client_host, self.subscribed_topic_names,
                self.subscribed_topic_regex, self.rebalance_timeout_ms, self.server_assignor,
                self.classic_session_timeout_ms, self.classic_protocols)

    def current(self) -> "Current":
        return Current(self.member_epoch, self.previous_member_epoch, self.state, self.assigned,
                       self.pending_revocation)

    def set_current(self, current: "Current") -> None:
        (self.member_epoch, self.previous_member_epoch, self.state, self.assigned,
         self.pending_revocation) = current

    def cancel_timers(self) -> None:
        for timer in (self.session_timer, self.rebalance_timer):
            if timer is not None:
                timer.cancel()
        self.session_timer = self.rebalance_timer = None


class ConsumerGroup:
    def __init__(self) -> None:
        self.group_epoch = 0
        self.assignment_epoch = 0
        self.members: dict[str, ConsumerMember] = {}
        self.static_members: dict[str, str] = {}  # instance id -> member id
        self.target: dict[str, Assignment] = {}  # member id -> its target assignment
        # the subscribed topics the target was computed for: {name: (topic id, partitions)}
        self.subscription_metadata: dict[str, tuple[uuid.UUID, int]] = {}

    def state(self) -> str:
        if not self.members:
            return "Empty"
        if self.group_epoch > self.assignment_epoch:
            return "Assigning"
        if any(m.member_epoch != self.assignment_epoch or m.state != MemberState.STABLE for m in self.members.values()):
            return "Reconciling"
        return "Stable"

    def add(self, member: ConsumerMember) -> None:
        self.members[member.member_id] = member
        if member.instance_id is not None:
            self.static_members[member.instance_id] = member.member_id

    def remove(self, member_id: str) -> ConsumerMember | None:
        member = self.members.pop(member_id, None)
        self.target.pop(member_id, None)
        if member is not None:
            member.cancel_timers()
            if member.instance_id is not None and self.static_members.get(member.instance_id) == member_id:
                del self.static_members[member.instance_id]
        return member

    def owners(self) -> dict[TopicIdPartition, str]:
        """Who holds each partition now (assigned, or still to be revoked)."""
        return {tp: m.member_id for m in self.members.values() for tp in m.assigned | m.pending_revocation}

    def subscribed_topic_names(self) -> set[str]:
        return {name for m in self.members.values() for name in m.subscribed_topic_names}


class Current(NamedTuple):
    """A member's place in reconciliation, as ConsumerGroupCurrentMemberAssignmentValue stores it."""
    member_epoch: int
    previous_member_epoch: int
    state: MemberState
    assigned: Assignment
    pending_revocation: Assignment


def reconcile(member: ConsumerMember, target_epoch: int, target: Assignment, owners: dict[TopicIdPartition, str],
              owned: Assignment | None) -> Current:
    """The member's next step toward ``target`` (Kafka's CurrentAssignmentBuilder); ``owned`` is what the
    member's heartbeat says it holds (None: not told). Equal to ``member.current()`` when nothing changes."""
    if member.state == MemberState.STABLE and member.member_epoch == target_epoch:
        return member.current()
    if member.state == MemberState.UNREVOKED_PARTITIONS and (owned is None or owned & member.pending_revocation):
        return member.current()  # still holds what it must give up
    keep = member.assigned & target
    revoke = member.assigned - keep
    wanted = target - keep
    free = frozenset(tp for tp in wanted if owners.get(tp, member.member_id) == member.member_id)
    if revoke and (owned is None or owned & revoke):
        # revoke first; the epoch stays until the member confirms
        return Current(member.member_epoch, member.previous_member_epoch, MemberState.UNREVOKED_PARTITIONS,
                       keep, revoke)
    state = MemberState.UNRELEASED_PARTITIONS if len(free) < len(wanted) else MemberState.STABLE
    previous = member.member_epoch if target_epoch != member.member_epoch else member.previous_member_epoch
    return Current(target_epoch, previous, state, keep | free, EMPTY_ASSIGNMENT)
