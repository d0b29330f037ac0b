"""Test-only fault injection, off unless its environment variable is set when the broker starts.

MOLDAU_FAULT_DROP_RESPONSE_EVERY=N (N >= 2): every Nth Produce request is
handled as usual -- its batches are appended -- but instead of answering, the
broker closes the connection: a lost acknowledgement. Producers retry, and
idempotent ones must not create duplicates.

MOLDAU_FAULT_KILL_AFTER_TXN_MARKERS=N (N >= 1): right after writing the Nth
transaction marker to a partition log, the broker sends itself SIGKILL -- a
kill -9 while the coordinator is between PrepareCommit (or PrepareAbort) and
CompleteCommit, typically with some of a transaction's partitions marked and
others not. After a restart the coordinator must finish the transaction.

MOLDAU_FAULT_FAIL_TXN_MARKERS=N (N >= 1): the first N transaction markers to
be written raise an error no code path expects, inside the WriteTxnMarkers
handler. The coordinator must log it and send the marker again.

MOLDAU_FAULT_SLOW_DISK_FILE=PATH: a slow disk under this broker's follower
replicas. While PATH exists and holds a number of milliseconds, every fetch
response from a leader waits that long before its batches are appended (the
event loop goes on: sessions, leaderships and other fetchers are unaffected),
so a delay past replica.lag.time.max.ms drops the follower out of the ISR and
removing the file lets it catch up and rejoin -- no restart. A relative PATH is
taken in the broker's log directory: one variable serves a whole test cluster,
and the file chooses which broker is slow.

MOLDAU_FAULT_DELAY_ISR_EXPANSION_MS=N (N >= 1): a leader holds each ISR
expansion N ms before writing it to the metadata store -- an etcd that is slow
to answer, or a leader paused with the write in flight. What the leader
acknowledges meanwhile must be on the replica being added.

MOLDAU_FAULT_DELAY_REPLICATION_WAIT_MS=N (N >= 1): an acks=all write (a
Produce, a transaction marker) starts waiting for its replicas N ms after its
append -- a busy event loop between the two, where the leadership the append
was made in may end. The answer must never say it was replicated then.

MOLDAU_FAULT_DELAY_TOPIC_WRITE_STEPS_MS=N (N >= 1): every etcd transaction of a
topic creation or growth (claim, partition states, topic key) waits N ms before
it is sent -- a slow etcd, so that two creates of one name overlap.

MOLDAU_FAULT_KILL_AFTER_TOPIC_WRITE_STEPS=N (N >= 1): right after the Nth
transaction of partition states of a topic creation or growth, the broker sends
itself SIGKILL -- a creator dead with some partition states in etcd and no topic
key. No later create of the name may trip over them.

MOLDAU_FAULT_FAIL_TASKS_FILE=PATH: background tasks fail on demand. The
broker takes PATH (renames it away) as soon as it appears, and every
supervised task it names (one name a line, as the supervisor names them:
isr-expiration, ReplicaFetcherThread-0-2, ...) fails where it waits, as if
an error no code path expects had ended its run; a task not running yet
(the load of a partition a coordinator is about to lead) fails as it
starts. The supervisor must log it and restart the task, and the task's
work must go on. A relative PATH is taken in the broker's log directory,
as for the slow disk.

MOLDAU_FAULT_ETCD_GAP_FILE=PATH: a gap in this broker's etcd connection. When
PATH appears holding a number of seconds, the broker takes it away and for that
long its watch ends and cannot start again, its view cannot be read again, and
its session keep-alives fail (a gap longer than etcd.session.timeout.ms loses
the session; "N watch" spares the session): whatever changes in etcd meanwhile
-- a broker leaving, a topic deleted, a new controller -- reaches this broker
only by reading the whole view again once the gap ends. "N drop" instead loses
the watch's events for N seconds without ending it (as a watch on an etcd member
cut from the others may): only the periodic audit can find what was lost. A
relative PATH is taken in the broker's log directory.

MOLDAU_FAULT_IGNORE_CANCELLATION=1: the broker runs a task that goes on when
cancelled (as a library call may, or a loop whose asyncio.wait_for lost the
cancellation). A SIGTERM must still end the process within the shutdown's
bounds, the task named in the log and the logs flushed and closed.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from pathlib import Path

from storage import clock

from .config.broker_config import ConfigError

DROP_RESPONSE_ENV = "MOLDAU_FAULT_DROP_RESPONSE_EVERY"
KILL_AFTER_MARKERS_ENV = "MOLDAU_FAULT_KILL_AFTER_TXN_MARKERS"
FAIL_MARKERS_ENV = "MOLDAU_FAULT_FAIL_TXN_MARKERS"
SLOW_DISK_ENV = "MOLDAU_FAULT_SLOW_DISK_FILE"
DELAY_ISR_EXPANSION_ENV = "MOLDAU_FAULT_DELAY_ISR_EXPANSION_MS"
DELAY_REPLICATION_WAIT_ENV = "MOLDAU_FAULT_DELAY_REPLICATION_WAIT_MS"
DELAY_TOPIC_WRITE_ENV = "MOLDAU_FAULT_DELAY_TOPIC_WRITE_STEPS_MS"
KILL_AFTER_TOPIC_WRITE_ENV = "MOLDAU_FAULT_KILL_AFTER_TOPIC_WRITE_STEPS"
IGNORE_CANCELLATION_ENV = "MOLDAU_FAULT_IGNORE_CANCELLATION"
FAIL_TASKS_FILE_ENV = "MOLDAU_FAULT_FAIL_TASKS_FILE"
ETCD_GAP_ENV = "MOLDAU_FAULT_ETCD_GAP_FILE"

log = logging.getLogger("moldau.faults")


class ResponseDropper:
    """Decides, for each response about to be sent, whether to close the connection instead."""

    def __init__(self, every: int) -> None:
        self.every = every
        self.produce_responses = 0

    def __call__(self, api_name: str) -> bool:
        if not self.every or api_name != "Produce":
            return False
        self.produce_responses += 1
        return self.produce_responses % self.every == 0


def _env_count(name: str, smallest: int) -> int:
    """The variable's value: 0 (off, also when unset) or a number from ``smallest`` on."""
    text = os.environ.get(name, "0")
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value != 0 and value < smallest:
        raise ConfigError(f"{name} must be 0 (off) or at least {smallest}, got {text!r}")
    return value


def response_dropper() -> ResponseDropper:
    """The dropper the environment asks for; one that never drops by default."""
    # 1 would drop every answer, so no produce could ever succeed
    return ResponseDropper(_env_count(DROP_RESPONSE_ENV, 2))


class Killer:
    """Counts the writes of one kind (``what``); kills the broker right after the chosen one."""

    def __init__(self, env: str, what: str) -> None:
        self.env, self.what = env, what
        self.after = _env_count(env, 1)
        self.written = 0

    def __call__(self) -> None:
        if not self.after:
            return
        self.written += 1
        if self.written == self.after:
            log.warning("fault injection (%s): killing the broker after %s %d", self.env, self.what, self.written)
            os.kill(os.getpid(), signal.SIGKILL)


def marker_killer() -> Killer:
    """The killer the environment asks for; one that never kills by default."""
    return Killer(KILL_AFTER_MARKERS_ENV, "transaction marker")


def topic_write_killer() -> Killer:
    """The killer the environment asks for; one that never kills by default."""
    return Killer(KILL_AFTER_TOPIC_WRITE_ENV, "partition states step")


class MarkerFailer:
    """Makes the first ``count`` marker writes fail with an unexpected error."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.failed = 0

    def __call__(self) -> None:
        if self.failed < self.count:
            self.failed += 1
            raise RuntimeError(f"fault injection ({FAIL_MARKERS_ENV}): marker write {self.failed} of {self.count} fails")


def marker_failer() -> MarkerFailer:
    """The failer the environment asks for; one that never fails by default."""
    return MarkerFailer(_env_count(FAIL_MARKERS_ENV, 1))


class SlowDisk:
    """The delay the slow-disk file asks for now (0 without the variable or the file)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.slow = False

    def delay_s(self) -> float:
        if self.path is None:
            return 0.0
        try:
            delay = int(self.path.read_text()) / 1000
        except (OSError, ValueError):
            delay = 0.0
        if (delay > 0) != self.slow:
            self.slow = delay > 0
            log.warning("fault injection (%s): follower appends %s", SLOW_DISK_ENV,
                        f"wait {delay:.1f}s each" if self.slow else "at full speed again")
        return delay


def slow_disk(log_dir: Path) -> SlowDisk:
    """The slow disk the environment asks for; one that never waits by default."""
    name = os.environ.get(SLOW_DISK_ENV)
    return SlowDisk(log_dir / name if name else None)


class EtcdGap:
    """Whether this broker's etcd watch and session are cut now (never without the variable)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.until = 0.0
        self.mode = ""  # "" (watch and session), "watch" or "drop"

    def poll(self) -> bool:
        """True when the file asks for a gap that ends the watch, which starts now."""
        if self.path is None:
            return False
        try:
            seconds, _, what = self.path.read_text().partition(" ")
            self.until = clock.monotonic() + float(seconds)
            self.path.unlink()
        except (OSError, ValueError):
            return False
        self.mode = what.strip()
        log.warning("fault injection (%s): %s for %ss", ETCD_GAP_ENV, {
            "": "no etcd watch or session keep-alive", "watch": "no etcd watch",
            "drop": "etcd watch events lost"}.get(self.mode, self.mode), seconds)
        return self.mode != "drop"  # (a lost event does not end the watch)

    def check(self, session: bool = False) -> None:
        """Raises as an unreachable etcd does while a gap lasts (for the session's keep-alives, if they
        are cut too)."""
        if clock.monotonic() < self.until and (self.mode == "" or self.mode == "watch" and not session):
            raise ConnectionError(f"fault injection ({ETCD_GAP_ENV}): etcd unreachable")

    def drops(self) -> bool:
        """Whether a watch event is lost now."""
        return self.mode == "drop" and clock.monotonic() < self.until


def etcd_gap(log_dir: Path) -> EtcdGap:
    """The gap hook the environment asks for; one that never cuts by default."""
    name = os.environ.get(ETCD_GAP_ENV)
    return EtcdGap(log_dir / name if name else None)


def isr_expansion_delay_s() -> float:
    """How long a leader holds an ISR expansion before writing it; 0 by default."""
    return _env_count(DELAY_ISR_EXPANSION_ENV, 1) / 1000


def replication_wait_delay_s() -> float:
    """How long an acks=all write waits before it starts waiting for its replicas; 0 by default."""
    return _env_count(DELAY_REPLICATION_WAIT_ENV, 1) / 1000


def topic_write_delay_s() -> float:
    """How long each etcd transaction of a topic creation or growth waits; 0 by default."""
    return _env_count(DELAY_TOPIC_WRITE_ENV, 1) / 1000


class InjectedFailure(RuntimeError):
    """What a task the task-failure fault names raises when it starts."""


class TaskFailer:
    """The names of the background tasks to fail now (none without the variable or the file)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path

    def take(self) -> set[str]:
        taken = self.path.with_name(self.path.name + ".taken")
        try:
            self.path.rename(taken)  # one look at each file the test writes, however often this runs
            return set(taken.read_text().split())
        except OSError:
            return set()


def task_failer(log_dir: Path) -> TaskFailer:
    """The failer the environment asks for; one that never fails a task by default."""
    name = os.environ.get(FAIL_TASKS_FILE_ENV)
    return TaskFailer(log_dir / name if name else None)


def start_cancellation_ignorer(supervisor) -> None:
    """Starts the task that ignores cancellation if the environment asks for it."""
    if _env_count(IGNORE_CANCELLATION_ENV, 1):
        log.warning("fault injection (%s): a task that ignores cancellation runs", IGNORE_CANCELLATION_ENV)
        supervisor.spawn(_ignore_cancellation())


async def _ignore_cancellation() -> None:
    while True:
        try:
            await clock.sleep(3600)
        except asyncio.CancelledError:
            log.warning("fault injection (%s): cancelled, going on", IGNORE_CANCELLATION_ENV)
