"""Fetches parked until they have min_bytes to return or max_wait_ms has passed (Kafka's DelayedFetch).

A parked fetch is watched under each of its partitions. An append to one of
them re-checks only that partition, and cheaply: if the end a reader may see
has not moved (an open transaction holds read_committed back) nothing
happens; otherwise the bytes appended since parking are the active segment's
growth, no read needed. Once the estimate reaches min_bytes (or a change
cannot be sized that way: a roll, a moved last stable offset) the fetch
completes and its handler reads once. The handler's task awaits
``completed``; cancelling it (its connection closed) takes the fetch out of
the purgatory.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from storage.log import Log
from storage.log_manager import LogManager

from .log_read import FetchPartition, TopicPartition, fetchable_end, partition_log


@dataclass(slots=True)
class _Watched:
    """Where a partition's log ended when the fetch parked."""

    log: Log
    partition_max_bytes: int
    end: int  # what fetchable_end said
    segment_base: int  # the active segment then
    position: int  # and its size
    counted: int = 0  # bytes appended since, as already added to the fetch's estimate


class DelayedFetch:
    def __init__(self, logs: LogManager, wanted: dict[TopicPartition, FetchPartition], isolation: int,
                 min_bytes: int, found: int):
        self.isolation = isolation
        self.min_bytes = min_bytes
        self.accumulated = found  # bytes the last read found, plus appends since
        self.watched: dict[TopicPartition, _Watched] = {}  # by topic name
        for key, want in wanted.items():
            log_ = partition_log(logs, key)
            if log_ is not None:
                active = log_.active_segment
                self.watched[TopicPartition(log_.topic, log_.partition)] = _Watched(
                    log_, want.partition_max_bytes, fetchable_end(log_, isolation), active.base_offset, active.size)
        self.completed: asyncio.Future = asyncio.get_running_loop().create_future()

    def try_complete(self, key: TopicPartition) -> bool:
        """Re-check after an append to ``key``; True (and ``completed`` set) once there is enough to return."""
        w = self.watched[key]
        log_ = w.log
        end = fetchable_end(log_, self.isolation)
        if end == w.end:
            return False
        active = log_.active_segment
        if end != log_.log_end_offset or active.base_offset != w.segment_base:
            return self.force_complete()
        appended = min(active.size - w.position, w.partition_max_bytes)
        self.accumulated += appended - w.counted
        w.counted = appended
        return self.accumulated >= self.min_bytes and self.force_complete()

    def force_complete(self) -> bool:
        if not self.completed.done():
            self.completed.set_result(None)
        return True


class FetchPurgatory:
    """Parked fetches, watched by partition (Kafka's DelayedOperationPurgatory for fetches)."""

    def __init__(self) -> None:
        self._watchers: dict[TopicPartition, set[DelayedFetch]] = {}

    async def park(self, delayed: DelayedFetch, max_wait_s: float) -> None:
        """Wait until ``delayed`` completes or ``max_wait_s`` passes."""
        for key in delayed.watched:
            self._watchers.setdefault(key, set()).add(delayed)
        timer = asyncio.get_running_loop().call_later(max_wait_s, delayed.force_complete)
        try:
            await delayed.completed
        finally:
            timer.cancel()
            self._remove(delayed)

    def check_and_complete(self, key: TopicPartition) -> None:
        """An append to ``key``: re-check the fetches watching it; completed ones stop being watched."""
        watchers = self._watchers.get(key)
        if watchers:
            for delayed in [d for d in watchers if d.try_complete(key)]:
                self._remove(delayed)

    def _remove(self, delayed: DelayedFetch) -> None:
        for key in delayed.watched:
            watchers = self._watchers.get(key)
            if watchers is not None:
                watchers.discard(delayed)
                if not watchers:
                    del self._watchers[key]
