"""Kafka's SimpleAssignor for share groups: every subscribed partition goes to some member, and a
partition may go to several members -- more consumers than partitions share them.

Per topic, with M subscribed members (sorted by id) and P partitions: if M >= P, member i gets
partition i % P (every member gets one, partitions are shared round-robin); otherwise partition j
goes to member j % M. Deterministic, so a coordinator that restarts computes the same target.
"""

from __future__ import annotations

import uuid

Assignment = frozenset  # of (topic id, partition)


def assign(subscriptions: dict[str, tuple[str, ...]], topics: dict[str, tuple[uuid.UUID, int]]
           ) -> dict[str, Assignment]:
    """member id -> its partitions; ``subscriptions`` member id -> topic names, ``topics`` name -> (id, partitions)."""
    result: dict[str, set] = {m: set() for m in subscriptions}
    for name, (topic_id, partitions) in sorted(topics.items()):
        members = sorted(m for m, subscribed in subscriptions.items() if name in subscribed)
        if not members or partitions <= 0:
            continue
        if len(members) >= partitions:
            for i, member in enumerate(members):
                result[member].add((topic_id, i % partitions))
        else:
            for p in range(partitions):
                result[members[p % len(members)]].add((topic_id, p))
    return {m: frozenset(a) for m, a in result.items()}
