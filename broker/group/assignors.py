"""Server-side assignors of KIP-848 consumer groups: ``uniform`` and ``range``.

An assignor maps each member to a target set of (topic id, partition). It
sees every member's subscribed topics (names resolved against the topics that
exist) and the previous target assignment, so it can keep partitions where they
are: a member joining or leaving moves only what must move.
"""

from __future__ import annotations

import uuid
from typing import Callable, Mapping

TopicIdPartition = tuple[uuid.UUID, int]
Assignment = frozenset  # of TopicIdPartition


class AssignmentSpec:
    """What an assignor is given: topics {name: (id, partition count)}, each member's subscribed
    topic names (only existing ones) and its previous target."""

    def __init__(self, topics: Mapping[str, tuple[uuid.UUID, int]], subscriptions: Mapping[str, set[str]],
                 previous: Mapping[str, Assignment]):
        self.topics = topics
        self.subscriptions = subscriptions
        self.previous = previous


def uniform(spec: AssignmentSpec) -> dict[str, Assignment]:
    """Balanced and sticky: every member keeps what it had that it may still have, then free partitions
    go to the least loaded member that subscribes to them, then partitions move one at a time from the
    most to the least loaded member that can take them until no move narrows the gap (counts differ by at
    most one among members with the same subscription)."""
    members = sorted(spec.subscriptions)
    eligible: dict[TopicIdPartition, list[str]] = {}
    for name, (topic_id, count) in sorted(spec.topics.items()):
        subscribers = [m for m in members if name in spec.subscriptions[m]]
        if subscribers:
            for p in range(count):
                eligible[(topic_id, p)] = subscribers
    owned: dict[str, set[TopicIdPartition]] = {m: set() for m in members}
    taken: set[TopicIdPartition] = set()
    for m in members:
        for tp in sorted(spec.previous.get(m, ()), key=_order):
            if m in eligible.get(tp, ()) and tp not in taken:
                owned[m].add(tp)
                taken.add(tp)
    for tp, subscribers in eligible.items():
        if tp not in taken:
            owned[min(subscribers, key=lambda m: (len(owned[m]), m))].add(tp)
    _balance(owned, eligible)
    return {m: frozenset(owned[m]) for m in members}


def _balance(owned: dict[str, set[TopicIdPartition]], eligible: dict[TopicIdPartition, list[str]]) -> None:
    while True:
        by_load = sorted(owned, key=lambda m: (-len(owned[m]), m))
        moved = False
        for giver in by_load:
            # the partition whose least loaded other candidate is the least loaded of all
            best = None
            for tp in sorted(owned[giver], key=_order, reverse=True):
                taker = min((m for m in eligible[tp] if m != giver), key=lambda m: (len(owned[m]), m), default=None)
                if taker is not None and len(owned[giver]) - len(owned[taker]) > 1:
                    if best is None or len(owned[taker]) < len(owned[best[1]]):
                        best = (tp, taker)
            if best is not None:
                tp, taker = best
                owned[giver].discard(tp)
                owned[taker].add(tp)
                moved = True
                break
        if not moved:
            return


def range_(spec: AssignmentSpec) -> dict[str, Assignment]:
    """Per topic, its subscribers in member id order each take a contiguous range; the first
    (partitions mod subscribers) take one more. Topics with the same partition count and subscribers are
    co-partitioned (member k gets the same partition numbers of each)."""
    owned: dict[str, set[TopicIdPartition]] = {m: set() for m in spec.subscriptions}
    for name, (topic_id, count) in sorted(spec.topics.items()):
        subscribers = sorted(m for m, topics in spec.subscriptions.items() if name in topics)
        if not subscribers:
            continue
        share, extra = divmod(count, len(subscribers))
        start = 0
        for i, m in enumerate(subscribers):
            n = share + (1 if i < extra else 0)
            owned[m].update((topic_id, p) for p in range(start, start + n))
            start += n
    return {m: frozenset(tps) for m, tps in owned.items()}


def _order(tp: TopicIdPartition) -> tuple[str, int]:
    return str(tp[0]), tp[1]


ASSIGNORS: dict[str, Callable[[AssignmentSpec], dict[str, Assignment]]] = {"uniform": uniform, "range": range_}
