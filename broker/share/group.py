"""ShareGroup and ShareMember: the state of one share group at its coordinator (kept in __consumer_offsets by
records.py, changed by coordinator.py)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import NamedTuple

STABLE = 0  # a share member's only MemberState: there is no revocation step


class StatePartitions(NamedTuple):
    """A topic's share partitions in ShareGroupStatePartitionMetadata."""
    name: str
    partitions: frozenset
    created_ms: int  # when the topic was added (Kafka's CreateTimestamp)


@dataclass
class ShareMember:
    member_id: str
    member_epoch: int = 0
    previous_member_epoch: int = 0
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed: tuple[str, ...] = ()
    assignment: frozenset = frozenset()  # its target: the partitions it is given at its next epoch
    deadline_ms: int = 0  # its session runs out then (not stored: a loaded member gets a fresh session)


@dataclass
class ShareGroup:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ShareMember] = field(default_factory=dict)
    # the subscribed topics the target was computed for: name -> (topic id, partitions)
    partition_counts: dict[str, tuple[uuid.UUID, int]] = field(default_factory=dict)
    # ShareGroupStatePartitionMetadata: the share partitions whose state is being initialized and those whose
    # state is (topic id -> StatePartitions), and the topics whose state is being deleted (topic id -> name)
    initializing: dict[uuid.UUID, StatePartitions] = field(default_factory=dict)
    initialized: dict[uuid.UUID, StatePartitions] = field(default_factory=dict)
    deleting: dict[uuid.UUID, str] = field(default_factory=dict)

    def state(self) -> str:
        return "Stable" if self.members else "Empty"
