"""The pipeline's input: JSON events, and the generator's deterministic plan of transactions.

An event is ``{"key": "user-3", "amount": 417, "ts": 1700000012345}``:
a key, an integer amount (integers, so sums do not depend on the order
Spark adds them in) and an event time in epoch milliseconds.

The job counts and sums per key over tumbling event-time windows of
``WINDOW_MS`` and emits a window once the watermark (the largest event time
seen, less ``WATERMARK_DELAY_MS``) has passed its end. The generator spaces
event time so that no event is ever late: transaction ``i`` belongs to epoch
``i // TXNS_PER_EPOCH`` and its events fall in the first half of that
epoch's window. Spark reads committed transactions in about the order they
were committed, so by the time it sees epoch ``e + 2`` (watermark at least
``e + 0.5`` windows) it has seen every event of epoch ``e``; epoch ``e``'s
windows close once epoch ``e + 3`` arrives.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass

WINDOW_MS = 10_000
WATERMARK_DELAY_MS = 15_000
BASE_TIME_MS = 1_700_000_000_000  # a whole number of windows since the epoch
KEYS = tuple(f"user-{i}" for i in range(8))
TXNS_PER_EPOCH = 5
FLUSH_KEY = "flush"
FLUSH_EPOCHS_AHEAD = 100  # far enough that every earlier window closes


@dataclass(frozen=True)
class Event:
    key: str
    amount: int
    ts: int  # event time, epoch milliseconds

    def to_json(self) -> bytes:
        return json.dumps({"key": self.key, "amount": self.amount, "ts": self.ts}).encode()


@dataclass(frozen=True)
class Txn:
    """One input transaction: its events, and whether the generator commits or aborts it."""

    index: int
    events: tuple[Event, ...]
    commit: bool


def plan(seed: int, first: int, count: int, *, events_per_txn: int = 10, abort_every: int = 7) -> list[Txn]:
    """Transactions ``first .. first + count - 1``; each depends only on (seed, its index).

    Every ``abort_every``-th transaction is aborted (0: none), so a plan can be
    produced in several runs that together equal one.
    """
    txns = []
    for index in range(first, first + count):
        rng = random.Random(f"{seed}:{index}")
        epoch_start = BASE_TIME_MS + (index // TXNS_PER_EPOCH) * WINDOW_MS
        events = tuple(
            Event(rng.choice(KEYS), rng.randint(1, 1000), epoch_start + rng.randrange(WINDOW_MS // 2))
            for _ in range(events_per_txn)
        )
        commit = abort_every <= 0 or index % abort_every != abort_every - 1
        txns.append(Txn(index, events, commit))
    return txns


def flush_event(last_index: int) -> Event:
    """An event far ahead in event time: once the job sees it, every window before it is emitted."""
    epoch = last_index // TXNS_PER_EPOCH + FLUSH_EPOCHS_AHEAD
    return Event(FLUSH_KEY, 0, BASE_TIME_MS + epoch * WINDOW_MS)
