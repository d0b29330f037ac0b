"""What the group and transaction coordinators share about their internal topics' partitions.

A coordinator serves the keys of the partitions of __consumer_offsets or
__transaction_state this broker leads (Kafka's onElection/onResignation):
on becoming leader it replays the partition in the background (its keys are
answered COORDINATOR_LOAD_IN_PROGRESS meanwhile; a replay that fails starts
over, supervised), then serves them; on losing leadership it unloads them
and answers NOT_COORDINATOR. Its state records go to the partition as a
leader's appends, stamped with the leader epoch, and a request that wrote
one is answered once the high watermark has passed it (acks=all), so a new
coordinator never lacks an acknowledged change.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from typing import Awaitable, Callable, Iterator, TypeVar, Union

from protocol.records import BatchHeader, read_header
from storage import clock
from storage.errors import InvalidProducerEpoch, RecordBatchTooLarge
from storage.log import Log

from ..errors import ErrorCode

log = logging.getLogger("moldau.coordinator")

LOADING, ACTIVE = "loading", "active"
Pending = Union[ErrorCode, Awaitable[ErrorCode]]  # an answer now, or one to wait for
T, U = TypeVar("T"), TypeVar("U")
LOAD_STEP_S = 0.02  # replay between two turns of the event loop: requests wait no longer than this

# a state write's failure as the coordinator's client sees it (Kafka's mapping for offset commits and
# transaction state): try again later, or find the coordinator again
_WRITE_ERRORS = {
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.REQUEST_TIMED_OUT: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.LEADER_NOT_AVAILABLE: ErrorCode.NOT_COORDINATOR,
    ErrorCode.NOT_LEADER_OR_FOLLOWER: ErrorCode.NOT_COORDINATOR,
    ErrorCode.KAFKA_STORAGE_ERROR: ErrorCode.NOT_COORDINATOR,
}


def client_error(error: ErrorCode) -> ErrorCode:
    """What a client is told when a coordinator's write failed with ``error``."""
    return _WRITE_ERRORS.get(error, error)


class OwnedPartitions:
    """The partitions one coordinator serves: loading or active, each at the leader epoch it was elected in.
    Each load runs supervised: one that fails is logged and started over, so no partition stays loading
    for good."""

    def __init__(self, topic: str, supervisor) -> None:
        self.topic = topic
        self.supervisor = supervisor
        self.states: dict[int, tuple[str, int]] = {}
        self._loads: dict[int, asyncio.Task] = {}

    def error(self, partition: int) -> ErrorCode:
        """NONE for a partition served here, else what a request for one of its keys is answered."""
        state = self.states.get(partition)
        if state is None:
            return ErrorCode.NOT_COORDINATOR
        return ErrorCode.NONE if state[0] == ACTIVE else ErrorCode.COORDINATOR_LOAD_IN_PROGRESS

    def epoch(self, partition: int) -> int:
        return self.states[partition][1]

    def elect(self, partition: int, epoch: int, load: Callable[[int], Awaitable[None]]) -> None:
        """Leader of ``partition`` at ``epoch``: replay it with ``load`` in the background, then serve it.
        A partition already loading or served here keeps its state and takes the new epoch."""
        if partition in self.states:
            self.states[partition] = (self.states[partition][0], epoch)
            return
        self.states[partition] = (LOADING, epoch)
        task = self.supervisor.start(self._load_name(partition), lambda: self._load(partition, load))
        self._loads[partition] = task
        task.add_done_callback(lambda done: self._loads.pop(partition) if self._loads.get(partition) is done else None)

    def _load_name(self, partition: int) -> str:
        return f"{self.topic}-{partition}-load"

    async def _load(self, partition: int, load: Callable[[int], Awaitable[None]]) -> None:
        await load(partition)  # installs what it replayed without yielding after its last read
        self.states[partition] = (ACTIVE, self.states[partition][1])
        log.debug("%s-%d loaded: coordinator at epoch %d", self.topic, partition, self.states[partition][1])

    async def loaded(self) -> None:
        """Once every load under way has ended (the share coordinator's admin view waits for it)."""
        while self._loads:
            await asyncio.wait(list(self._loads.values()))

    def resign(self, partition: int) -> bool:
        """No longer leader of ``partition``; True if it was loading or served here."""
        if self._loads.pop(partition, None) is not None:
            self.supervisor.stop(self._load_name(partition))
        return self.states.pop(partition, None) is not None


async def replay(log_: Log, feed: Callable[[BatchHeader, bytes], None]) -> None:
    """Feed every batch of ``log_`` to ``feed`` in log order, a step at a time so that other requests
    are served meanwhile. Returns right after feeding the last batch, with no turn of the loop
    between it and the caller's next statement, so nothing appended can be missed."""
    position = 0
    while True:
        fed = 0
        step_ends = clock.monotonic() + LOAD_STEP_S
        for hdr, data in _from(log_, position):
            feed(hdr, data)
            position = hdr.next_offset
            fed += 1
            if clock.monotonic() > step_ends:
                break
        if position >= log_.log_end_offset or fed == 0:
            return
        await asyncio.sleep(0)


def _from(log_: Log, position: int) -> Iterator[tuple[BatchHeader, bytes]]:
    for hdr, data in log_.batches(position):
        if hdr.next_offset > position:  # (the batch holding ``position`` may have been fed already)
            yield hdr, data


def append(replicas, topic: str, partition: int, buf: bytearray, now: int, required_acks: int = -1,
           from_coordinator: bool = False) -> tuple[ErrorCode, int]:
    """(error, offset of the first record) of appending one batch as the partition's leader.

    With ``required_acks`` -1 (acks=all) it is refused before the append when the ISR is smaller
    than the partition's min.insync.replicas (NOT_ENOUGH_REPLICAS)."""
    leader, error = replicas.leader_partition(topic, partition)
    if leader is None:
        return error, -1
    log_ = leader.log
    if required_acks == -1 and len(leader.state.isr) < log_.config.min_insync_replicas:
        return ErrorCode.NOT_ENOUGH_REPLICAS, -1
    try:
        first, _ = log_.append(buf, [(0, read_header(buf))], now, from_coordinator=from_coordinator,
                               leader_epoch=leader.leader_epoch)
    except RecordBatchTooLarge:
        return ErrorCode.MESSAGE_TOO_LARGE, -1
    except InvalidProducerEpoch:
        return ErrorCode.INVALID_PRODUCER_EPOCH, -1
    except OSError as exc:
        log.error("append to %s failed: %s", log_.name, exc)
        return ErrorCode.KAFKA_STORAGE_ERROR, -1
    return ErrorCode.NONE, first


def committed(replicas, topic: str, partition: int, timeout_ms: int) -> Pending:
    """acks=all for what this leader has appended to the partition so far, as its client is told: NONE
    once the high watermark reaches the log end, else why not. An answer at once when there is nothing to
    wait for (always on a standalone broker), so its request is answered in the same turn."""
    leader, error = replicas.leader_partition(topic, partition)
    if leader is None:
        return client_error(error)
    end = leader.log.log_end_offset
    if _committed_now(leader):
        return ErrorCode.NONE

    async def wait() -> ErrorCode:
        return client_error(await leader.wait_for_replication(end, leader.leader_epoch, timeout_ms / 1000))

    return wait()


def is_committed(replicas, topic: str, partition: int) -> bool:
    """Whether all this leader has appended to the partition is committed now (always, standalone)."""
    leader, _ = replicas.leader_partition(topic, partition)
    return leader is not None and _committed_now(leader)


def _committed_now(leader) -> bool:
    return (leader.high_watermark >= leader.log.log_end_offset
            and len(leader.state.isr) >= leader.log.config.min_insync_replicas)


def then(pending: T | Awaitable[T], respond: Callable[[T], U]) -> U | Awaitable[U]:
    """``respond(answer)`` at once if ``pending`` is an answer already, else once it is."""
    if not inspect.isawaitable(pending):
        return respond(pending)

    async def later() -> U:
        return respond(await pending)

    return later()


async def settled(pending: T | Awaitable[T]) -> T:
    return await pending if inspect.isawaitable(pending) else pending
