"""LastStableOffsetWatch: a log line for each partition whose last stable offset is stuck.

No transaction may stay open longer than transaction.max.timeout.ms: its
coordinator aborts it at its timeout. A partition whose last stable offset
has stayed at an open transaction's first offset for longer than that holds
a hanging transaction -- one no coordinator will end (a bug, a lost marker, a
hand-made write) -- and its read_committed consumers are stuck behind it.
Each such partition is named in a warning (the coordinator's timeout check
interval is allowed on top), again every further such period while it
stays stuck, so an operator can end it with `moldau transactions
find-hanging` and `abort`.
"""

from __future__ import annotations

import logging
from typing import NamedTuple

from storage.log_manager import LogManager

log = logging.getLogger("moldau.transaction")


class _Stuck(NamedTuple):
    offset: int  # the last stable offset, where the earliest open transaction began
    since_ms: int  # when it was first seen there
    warned_ms: int  # when the last warning was logged (-1: never)


class LastStableOffsetWatch:
    def __init__(self, logs: LogManager, max_timeout_ms: int):
        """``max_timeout_ms``: how long an LSO may stay put before it is reported."""
        self.logs = logs
        self.max_timeout_ms = max_timeout_ms
        self._stuck: dict[tuple[str, int], _Stuck] = {}

    def check(self, now_ms: int) -> None:
        stuck = {}
        for tp, log_ in self.logs.logs.items():
            state = log_.producer_state
            first_unstable = state.first_unstable_offset
            if first_unstable is None:
                continue
            seen = self._stuck.get(tp)
            if seen is None or seen.offset != first_unstable:
                seen = _Stuck(first_unstable, now_ms, -1)
            if (now_ms - seen.since_ms > self.max_timeout_ms
                    and (seen.warned_ms < 0 or now_ms - seen.warned_ms > self.max_timeout_ms)):
                producer_id = next(iter(state.ongoing_txns))
                log.warning("%s-%d: the last stable offset has stayed at %d for %d s, longer than "
                            "transaction.max.timeout.ms: the transaction of producer %d starting there is hanging "
                            "(end it with `moldau transactions abort --topic %s --partition %d --start-offset %d`)",
                            *tp, first_unstable, (now_ms - seen.since_ms) // 1000, producer_id, *tp, first_unstable)
                seen = seen._replace(warned_ms=now_ms)
            stuck[tp] = seen
        self._stuck = stuck

    def hanging(self, now_ms: int) -> int:
        """Partitions whose last stable offset was stuck longer than transaction.max.timeout.ms at the last check."""
        return sum(now_ms - seen.since_ms > self.max_timeout_ms for seen in self._stuck.values())
