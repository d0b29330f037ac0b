"""Fetches parked until they have min_bytes to return or max_wait_ms has passed (Kafka's DelayedFetch).

A parked fetch is watched under each of its topics. An append re-checks only
the appended partition, and cheaply, by comparing offsets: the parked fetch
found nothing, so with min_bytes 1 (every client's default) the end a reader
may see moving past the fetch offset completes it; an end that has not moved
(an open transaction holds read_committed back) changes nothing. For a
larger min_bytes the bytes appended since parking are the active segment's
growth, no read needed; a change that cannot be sized that way (a roll, a
moved last stable offset) completes the fetch. The handler then reads once.
The handler parks the fetch before it returns, in the turn of its read: an
append between that read and the first turn of the task that awaits the
answer is seen. Cancelling that task (its connection closed) takes the fetch
out of the purgatory, at the latest once max_wait_ms has passed.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Mapping, Set
from dataclasses import dataclass

from storage import clock
from storage.log import Log
from storage.log_manager import LogManager

from .log_read import FetchPartition, TopicPartition, fetchable_end, partition_log


@dataclass(slots=True)
class _End:
    """Where a partition's log ended when the fetch parked (for min_bytes past one)."""

    end: int  # what fetchable_end said
    segment_base: int  # the active segment then
    position: int  # and its size
    counted: int = 0  # bytes appended since, as already added to the fetch's estimate


class DelayedFetch:
    def __init__(self, logs: LogManager, wanted: Mapping[TopicPartition, FetchPartition], topics: Set,
                 isolation: int, min_bytes: int, found: int):
        self.wanted = wanted
        self.isolation = isolation
        self.min_bytes = min_bytes
        self.accumulated = found  # bytes the last read found, plus appends since
        # the topics watched (``topics``: of ``wanted``), by name, with the key the request uses for each
        # (a name, or a topic id)
        self.topics: dict[str, str | uuid.UUID] = {}
        for topic in topics:
            found_topic = logs.topic_by_id(topic) if isinstance(topic, uuid.UUID) else logs.topic(topic)
            if found_topic is not None:
                self.topics[found_topic.name] = topic
        # a parked fetch found nothing: with min_bytes 1 (clients' default) any end moving past a fetch
        # offset completes it; a larger min_bytes needs each end's position to size the appends
        self.ends: dict[TopicPartition, _End] = {}
        if min_bytes > 1:
            for key in wanted:
                log_ = partition_log(logs, key)
                if log_ is not None:
                    active = log_.active_segment
                    self.ends[key] = _End(fetchable_end(log_, isolation), active.base_offset, active.size)
        self.completed: asyncio.Future = asyncio.get_running_loop().create_future()

    def try_complete(self, log_: Log) -> bool:
        """Re-check after an append to ``log_``; True (and ``completed`` set) once there is enough to return."""
        key = TopicPartition(self.topics.get(log_.topic), log_.partition)
        want = self.wanted.get(key)
        if want is None:
            return False
        end = fetchable_end(log_, self.isolation)
        if self.min_bytes <= 1:
            return end > want.fetch_offset and self.force_complete()
        parked = self.ends.get(key)
        if parked is None or end == parked.end:
            return False
        active = log_.active_segment
        if end != log_.log_end_offset or active.base_offset != parked.segment_base:
            return self.force_complete()
        appended = min(active.size - parked.position, want.partition_max_bytes)
        self.accumulated += appended - parked.counted
        parked.counted = appended
        return self.accumulated >= self.min_bytes and self.force_complete()

    def force_complete(self) -> bool:
        if not self.completed.done():
            self.completed.set_result(None)
        return True


class FetchPurgatory:
    """Parked fetches, watched by topic (Kafka's DelayedOperationPurgatory for fetches, which keys by
    partition: by topic, parking a fetch of thousands of partitions costs a few dictionary entries)."""

    def __init__(self) -> None:
        self._watchers: dict[str, set[DelayedFetch]] = {}

    def watch(self, delayed: DelayedFetch, max_wait_s: float) -> asyncio.Future:
        """Watch ``delayed`` from now on; the future it returns is done once it completes or ``max_wait_s``
        passes. Called by the handler itself, not by the task that awaits the answer: that task first runs a
        turn of the loop later, and an append in between (another connection's Produce, handled in the same
        turn) would otherwise find nobody waiting and leave the fetch parked for its whole max_wait_ms. A
        cancelled wait (its connection closed) stops being watched too."""
        for name in delayed.topics:
            self._watchers.setdefault(name, set()).add(delayed)
        timer = clock.call_later(max_wait_s, delayed.force_complete)

        def done(_) -> None:
            timer.cancel()
            self._remove(delayed)

        delayed.completed.add_done_callback(done)
        return delayed.completed

    def check_and_complete(self, log_: Log) -> None:
        """An append to ``log_``: re-check the fetches watching its topic; completed ones stop being watched."""
        watchers = self._watchers.get(log_.topic)
        if watchers:
            for delayed in [d for d in watchers if d.try_complete(log_)]:
                self._remove(delayed)

    def _remove(self, delayed: DelayedFetch) -> None:
        for name in delayed.topics:
            watchers = self._watchers.get(name)
            if watchers is not None:
                watchers.discard(delayed)
                if not watchers:
                    del self._watchers[name]
