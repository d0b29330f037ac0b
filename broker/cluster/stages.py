"""Per-stage timestamps of a write's way through replication, for finding where its latency goes (issue 26).

Off by default; ``log.level=INFO,moldau.stages=DEBUG`` turns them on. Each line is one stage of one
partition, with the offset it reached and the time of CLOCK_MONOTONIC, which all processes of a
machine share, so the lines of a cluster's brokers on one machine line up:

    <stage> <topic>-<partition> <offset> <seconds> [replica <id>]

On the leader: ``read`` (a Produce was read off its connection; the base offset its batch got),
``appended`` (the log end after any append), ``sent`` (a follower's fetch read
records up to that offset), ``follower-fetch`` (a follower's fetch from that offset arrived),
``high-watermark`` (moved to that offset), ``answered`` (a Produce's answer for the batch at that
base offset is written to its connection). On a follower: ``received`` (a fetch response brought
records up to that offset), ``appended``, ``fetch-sent`` (its next fetch, from that offset).
``python -m bench.stages`` runs a cluster with them on and tabulates the steps.
"""

from __future__ import annotations

import gc
import logging

from protocol.records import next_offset_at
from storage import clock
from storage.segment import whole_batches

log = logging.getLogger("moldau.stages")


def on() -> bool:
    return log.isEnabledFor(logging.DEBUG)


def watch_collections() -> None:
    """Stage lines for the garbage collector's pauses too (``gc <generation> <ms> <seconds>``): a pause
    stops every step of every write in the process."""
    if not on():
        return
    started = [0.0]

    def timed(phase: str, info: dict) -> None:
        if phase == "start":
            started[0] = clock.monotonic()
        else:
            log.debug("gc %d %.3f %.6f", info["generation"], (clock.monotonic() - started[0]) * 1000, started[0])

    gc.callbacks.append(timed)


def mark(stage: str, topic: str, partition: int, offset: int, replica: int | None = None,
         at: float | None = None) -> None:
    if log.isEnabledFor(logging.DEBUG):
        log.debug("%s %s-%d %d %.6f%s", stage, topic, partition, offset, clock.monotonic() if at is None else at,
                  "" if replica is None else f" replica {replica}")


def records_end(records) -> int:
    """The offset after the last whole batch of ``records`` (-1 if there is none)."""
    end, last = whole_batches(records)  # headers only: a copy and a CRC of a megabyte were most of a step
    return next_offset_at(records, last) if end else -1


def produce_read(result: dict, read_at: float | None) -> None:
    """``read``: when the server read the Produce whose batches were appended at these base offsets."""
    if read_at is not None:
        for topic in result["responses"]:
            for part in topic["partition_responses"]:
                if part["error_code"] == 0:
                    mark("read", topic["name"], part["index"], part["base_offset"], at=read_at)


def produce_answered(result: dict) -> None:
    for topic in result["responses"]:
        for part in topic["partition_responses"]:
            if part["error_code"] == 0:
                mark("answered", topic["name"], part["index"], part["base_offset"])
