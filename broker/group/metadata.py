"""GroupMetadata and MemberMetadata: the state of one classic consumer group.

Pure state and bookkeeping; what to do on a join, a timeout or a commit is
decided by the GroupCoordinator. Futures of members waiting on a JoinGroup or
SyncGroup response live on the member and are completed through the group,
so a member that is removed or replaced never leaves a client waiting.
"""

from __future__ import annotations

import asyncio
import struct
from collections import Counter
from dataclasses import dataclass
from enum import Enum
from typing import NamedTuple

from broker.errors import ErrorCode
from storage import clock

CONSUMER_PROTOCOL_TYPE = "consumer"
UNKNOWN_MEMBER_ID = ""

TopicPartition = tuple[str, int]


class GroupState(Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


# state -> the states it may be entered from (Kafka's classic group state machine)
_VALID_PREVIOUS = {
    GroupState.PREPARING_REBALANCE: {GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY},
    GroupState.COMPLETING_REBALANCE: {GroupState.PREPARING_REBALANCE},
    GroupState.STABLE: {GroupState.COMPLETING_REBALANCE},
    GroupState.EMPTY: {GroupState.PREPARING_REBALANCE},
    GroupState.DEAD: set(GroupState),
}


class CommittedOffset(NamedTuple):
    offset: int
    leader_epoch: int  # -1: unknown
    metadata: str
    commit_timestamp: int
    expire_timestamp: int | None = None  # set only by OffsetCommit v2-4 with a retention time
    record_offset: int = -1  # where the commit was appended in __consumer_offsets; the later one wins


class JoinGroupResult(NamedTuple):
    error: ErrorCode
    member_id: str
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str = ""
    members: list = []  # JoinGroup response members; only the leader gets them
    skip_assignment: bool = False


class SyncGroupResult(NamedTuple):
    error: ErrorCode
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


def _resolve(future: asyncio.Future | None, result) -> None:
    if future is not None and not future.done():
        future.set_result(result)


@dataclass(eq=False)
class MemberMetadata:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]  # (name, metadata) in the member's order of preference
    assignment: bytes = b""
    is_new: bool = False  # joined but not yet through a completed join phase
    join_future: asyncio.Future | None = None
    sync_future: asyncio.Future | None = None
    session_timer: asyncio.TimerHandle | None = None

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    def metadata(self, protocol: str) -> bytes:
        return next((meta for name, meta in self.protocols if name == protocol), b"")

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        return self.protocols == protocols

    def vote(self, candidates: set[str]) -> str:
        """The member's most preferred protocol among those every member supports."""
        return next(name for name, _ in self.protocols if name in candidates)

    def cancel_session_timer(self) -> None:
        if self.session_timer is not None:
            self.session_timer.cancel()
            self.session_timer = None


def consumer_subscription(metadata: bytes) -> set[str] | None:
    """Topics of a ConsumerProtocolSubscription (any version), None if it does not parse.

    The broker reads subscriptions only to know which topics a group consumes
    (OffsetDelete, offset expiry); assignors stay entirely client-side.
    """
    try:
        (count,) = struct.unpack_from(">i", metadata, 2)  # after the int16 version
        pos = 6
        topics = set()
        for _ in range(count):
            (n,) = struct.unpack_from(">h", metadata, pos)
            if n < 0 or pos + 2 + n > len(metadata):
                return None
            topics.add(metadata[pos + 2 : pos + 2 + n].decode())
            pos += 2 + n
        return topics
    except (struct.error, UnicodeDecodeError):
        return None


class GroupMetadata:
    def __init__(self, group_id: str, now: int):
        self.group_id = group_id
        self.state = GroupState.EMPTY
        self.state_timestamp = now
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.generation_id = 0
        self.leader_id: str | None = None
        self.members: dict[str, MemberMetadata] = {}
        self.static_members: dict[str, str] = {}  # group.instance.id -> member id
        self.pending_members: dict[str, asyncio.TimerHandle] = {}  # told MEMBER_ID_REQUIRED, not yet rejoined
        self.pending_sync: set[str] = set()  # members of this generation that have not sent SyncGroup
        self.new_member_added = False  # extends the initial rebalance delay
        self.join_timer: asyncio.TimerHandle | None = None
        self.in_initial_delay = False  # join_timer is the initial delay, not the rebalance timeout
        self.sync_timer: asyncio.TimerHandle | None = None
        self.subscribed_topics: set[str] | None = None  # None: unknown
        self.offsets: dict[TopicPartition, CommittedOffset] = {}
        # producer id -> offsets written in a transaction that has not ended yet
        self.pending_txn_offsets: dict[int, dict[TopicPartition, CommittedOffset]] = {}
        # plain commits appended but not yet committed (acks=all): how many per partition
        self.pending_offset_commits: dict[TopicPartition, int] = {}
        self.consumer = None  # a KIP-848 consumer group's state (consumer_group.ConsumerGroup); None: classic
        self.share = None  # while loading only: a share group's state (broker/share), handed to its coordinator

    def __repr__(self) -> str:
        return f"<group {self.group_id} {self.state.value} generation {self.generation_id}>"

    def is_in(self, *states: GroupState) -> bool:
        return self.state in states

    def is_empty(self) -> bool:
        """No classic members, and no consumer-protocol members either."""
        return self.state is GroupState.EMPTY and not (self.consumer is not None and self.consumer.members)

    def transition_to(self, state: GroupState, now: int | None = None) -> None:
        if self.state not in _VALID_PREVIOUS[state]:
            raise RuntimeError(f"group {self.group_id}: illegal transition {self.state.value} -> {state.value}")
        self.state = state
        self.state_timestamp = clock.wall_ms() if now is None else now

    # ---- members --------------------------------------------------------------

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    def add(self, member: MemberMetadata, future: asyncio.Future) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        if member.is_static:
            self.static_members[member.group_instance_id] = member.member_id
        if self.leader_id is None:
            self.leader_id = member.member_id
        member.join_future = future
        timer = self.pending_members.pop(member.member_id, None)
        if timer is not None:
            timer.cancel()

    def remove(self, member_id: str) -> None:
        member = self.members.pop(member_id, None)
        if member is not None:
            member.cancel_session_timer()
            # a client still waiting on this member's behalf must not hang
            _resolve(member.join_future, JoinGroupResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id))
            _resolve(member.sync_future, SyncGroupResult(ErrorCode.UNKNOWN_MEMBER_ID))
            member.join_future = member.sync_future = None
            if member.is_static:
                self.static_members.pop(member.group_instance_id, None)
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        self.pending_sync.discard(member_id)

    def update_member(self, member: MemberMetadata, joining: MemberMetadata, future: asyncio.Future | None) -> None:
        """Take a rejoining member's protocols and timeouts; its JoinGroup now waits on ``future``."""
        member.protocols = joining.protocols
        member.rebalance_timeout_ms = joining.rebalance_timeout_ms
        member.session_timeout_ms = joining.session_timeout_ms
        if member.join_future is not future:
            # a JoinGroup superseded by a newer one from the same member (another connection)
            _resolve(member.join_future, JoinGroupResult(ErrorCode.REBALANCE_IN_PROGRESS, member.member_id))
        member.join_future = future

    def await_sync(self, member: MemberMetadata, future: asyncio.Future) -> None:
        if member.sync_future is not future:
            _resolve(member.sync_future, SyncGroupResult(ErrorCode.REBALANCE_IN_PROGRESS))
        member.sync_future = future

    def complete_join(self, member: MemberMetadata, result: JoinGroupResult) -> None:
        _resolve(member.join_future, result)
        member.join_future = None

    def complete_sync(self, member: MemberMetadata, result: SyncGroupResult) -> bool:
        """Answer the member's waiting SyncGroup, if there is one."""
        waiting = member.sync_future is not None and not member.sync_future.done()
        _resolve(member.sync_future, result)
        member.sync_future = None
        return waiting

    def is_static_member_fenced(self, group_instance_id: str | None, member_id: str) -> bool:
        """A request from an older incarnation of a static member (its id was replaced)."""
        if group_instance_id is None:
            return False
        current = self.static_members.get(group_instance_id)
        return current is not None and current != member_id

    def replace_static_member(self, group_instance_id: str, old_member_id: str, new_member_id: str) -> MemberMetadata:
        member = self.members.pop(old_member_id)
        # whoever still waits as the old member id has been fenced by the new one
        self.complete_join(member, JoinGroupResult(ErrorCode.FENCED_INSTANCE_ID, old_member_id))
        self.complete_sync(member, SyncGroupResult(ErrorCode.FENCED_INSTANCE_ID))
        member.member_id = new_member_id
        self.members[new_member_id] = member
        self.static_members[group_instance_id] = new_member_id
        if self.leader_id == old_member_id:
            self.leader_id = new_member_id
        if old_member_id in self.pending_sync:
            self.pending_sync.discard(old_member_id)
            self.pending_sync.add(new_member_id)
        return member

    def has_all_members_joined(self) -> bool:
        return not self.pending_members and all(m.join_future is not None for m in self.members.values())

    def elect_joined_leader(self) -> bool:
        """Keep the leader if it rejoined, else pick any member that did; False if none did."""
        leader = self.members.get(self.leader_id) if self.leader_id is not None else None
        if leader is None:
            return False
        if leader.join_future is not None:
            return True
        joined = next((m for m in self.members.values() if m.join_future is not None), None)
        if joined is None:
            return False
        self.leader_id = joined.member_id
        return True

    @property
    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    # ---- protocols ------------------------------------------------------------

    def candidate_protocols(self) -> set[str]:
        """Protocols every member supports."""
        counts = Counter(name for m in self.members.values() for name in {n for n, _ in m.protocols})
        return {name for name, n in counts.items() if n == len(self.members)}

    def supports_protocols(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        if not self.members:
            return bool(protocol_type) and bool(protocols)
        candidates = self.candidate_protocols()
        return protocol_type == self.protocol_type and any(name in candidates for name, _ in protocols)

    def select_protocol(self) -> str:
        """Each member votes for its favourite common protocol; the most votes win."""
        candidates = self.candidate_protocols()
        votes = Counter(m.vote(candidates) for m in self.members.values())
        return votes.most_common(1)[0][0]

    def init_next_generation(self, now: int) -> None:
        self.generation_id += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.transition_to(GroupState.COMPLETING_REBALANCE, now)
        else:
            self.protocol_name = None
            self.transition_to(GroupState.EMPTY, now)
        self.update_subscribed_topics()
        self.pending_sync = set(self.members)

    def update_subscribed_topics(self) -> None:
        """The topics the members of this generation subscribe to (consumer groups only)."""
        self.subscribed_topics = None
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return
        topics: set[str] = set()
        for member in self.members.values():
            subscription = consumer_subscription(member.metadata(self.protocol_name))
            if subscription is None:
                return
            topics |= subscription
        self.subscribed_topics = topics

    def is_subscribed_to(self, topic: str) -> bool:
        """Unknown subscriptions count as subscribed, so nothing in use is deleted."""
        return self.subscribed_topics is None or topic in self.subscribed_topics

    def member_list(self) -> list[dict]:
        """Every member with its metadata for the chosen protocol (the leader's JoinGroup response)."""
        return [
            {"member_id": m.member_id, "group_instance_id": m.group_instance_id, "metadata": m.metadata(self.protocol_name)}
            for m in self.members.values()
        ]

    # ---- offsets --------------------------------------------------------------

    def has_pending_offsets(self, tp: TopicPartition) -> bool:
        """An offset for ``tp`` is written but not yet in effect (OffsetFetch's require_stable): by an
        open transaction, or by a commit whose append is not committed yet."""
        return tp in self.pending_offset_commits or any(tp in staged for staged in self.pending_txn_offsets.values())

    def prepare_offset_commit(self, offsets: dict[TopicPartition, CommittedOffset]) -> None:
        """Offsets appended but not yet committed: invisible until they are (Kafka's pendingOffsetCommits)."""
        for tp in offsets:
            self.pending_offset_commits[tp] = self.pending_offset_commits.get(tp, 0) + 1

    def complete_offset_commit(self, offsets: dict[TopicPartition, CommittedOffset], committed: bool) -> None:
        """The append of ``offsets`` is committed (they take effect) or failed (they are dropped)."""
        for tp in offsets:
            left = self.pending_offset_commits.pop(tp) - 1
            if left:
                self.pending_offset_commits[tp] = left
        if committed:
            self._apply_offsets(offsets)

    def stage_txn_offsets(self, producer_id: int, offsets: dict[TopicPartition, CommittedOffset]) -> None:
        """Offsets written inside a transaction: invisible until its commit marker."""
        self.pending_txn_offsets.setdefault(producer_id, {}).update(offsets)

    def complete_txn_offsets(self, producer_id: int, committed: bool) -> None:
        """The producer's transaction ended: its offsets become visible (commit) or vanish (abort)."""
        staged = self.pending_txn_offsets.pop(producer_id, {})
        if committed:
            self._apply_offsets(staged)

    def _apply_offsets(self, offsets: dict[TopicPartition, CommittedOffset]) -> None:
        """The later append wins, whichever order the commits take effect in."""
        for tp, offset in offsets.items():
            current = self.offsets.get(tp)
            if current is None or current.record_offset < offset.record_offset:
                self.offsets[tp] = offset

    def expired_offsets(self, now: int, retention_ms: int) -> list[TopicPartition]:
        """Kafka's rule: an empty group's offsets expire relative to when it became empty,
        a simple (assign-only) group's relative to their commit, a stable consumer group's
        only for topics it no longer subscribes to."""
        if self.protocol_type is None:
            since_empty, keep = False, set()
        elif self.is_in(GroupState.EMPTY):
            since_empty, keep = True, set()
        elif self.is_in(GroupState.STABLE) and self.subscribed_topics is not None:
            since_empty, keep = False, self.subscribed_topics
        else:
            return []

        def expired(c: CommittedOffset) -> bool:
            if c.expire_timestamp is not None:
                return now >= c.expire_timestamp
            return now - (self.state_timestamp if since_empty else c.commit_timestamp) >= retention_ms

        return [
            tp
            for tp, c in self.offsets.items()
            if tp[0] not in keep and not self.has_pending_offsets(tp) and expired(c)
        ]
