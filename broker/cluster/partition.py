"""Partition: one replica of a partition on this broker (Kafka's Partition), as leader or follower.

As leader it tracks each follower's log end offset from the follower's fetches, moves the high
watermark to the smallest log end offset in the ISR, parks acks=all produces until the high watermark
passes them (delayed produce), and shrinks or expands the ISR -- each change a compare-and-swap in the
metadata store before it takes effect. As follower it is fetched by the ReplicaFetcher of its leader.
On a standalone broker every partition is led here with an ISR of one, and the high watermark is the
log end offset.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
from collections.abc import Callable
from dataclasses import dataclass

from broker import faults
from broker.cluster import stages
from broker.errors import ErrorCode
from storage import clock
from storage.log import Log

from .metadata import PartitionState

log = logging.getLogger("moldau.replica")

_arrivals = itertools.count()  # orders waits for the same offset, so the heap never compares callbacks


@dataclass
class FollowerState:
    log_end_offset: int = -1  # unknown until the follower's first fetch from this leader
    last_caught_up_ms: int = 0  # last time it had all the leader had (Kafka's lastCaughtUpTime)
    last_fetch_ms: int = 0
    leader_end_at_last_fetch: int = 0
    # (fetch session, its key of the partition) while the follower is caught up and the partition unchanged
    # since: the session's fetches count as caught-up fetches of it, with no per-partition update each time
    settled_in: tuple | None = None

    def caught_up_ms(self) -> int:
        if self.settled_in is not None:
            session, key = self.settled_in
            if key in session.partitions:
                return max(self.last_caught_up_ms, session.fetch_ms)
        return self.last_caught_up_ms


class Partition:
    def __init__(self, manager, topic: str, index: int, log_: Log, state: PartitionState):
        self.manager = manager  # the ReplicaManager that holds it
        self.topic = topic
        self.index = index
        self.log = log_
        self.state = state
        self.followers: dict[int, FollowerState] = {}
        # acks=all waits, a heap of (offset, arrival, leader epoch, reached callback): a high watermark that
        # moves takes those it passed off the front, so a deep pipeline of waits costs no scan of them all per move
        self._hw_waiters: list[tuple[int, int, int, Callable[[bool], None]]] = []
        self.isr_change_pending = False
        # where this broker's current leadership began (Kafka's leaderEpochStartOffsetOpt); None as a follower
        self.epoch_start_offset: int | None = None
        # ISRs this leader proposed that may be in the store: until a newer state arrives their members
        # count for the high watermark (Kafka's maximal ISR), so a follower being added is never in the
        # store's ISR without the records acknowledged meanwhile
        self.proposed_isr: tuple[int, ...] = ()

    @property
    def key(self) -> tuple[str, int]:
        return self.topic, self.index

    @property
    def is_leader(self) -> bool:
        return self.state.leader == self.manager.node_id

    @property
    def leader_epoch(self) -> int:
        return self.state.leader_epoch

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    def check_epoch(self, current_leader_epoch: int) -> ErrorCode:
        """Fetch's and ListOffsets' current_leader_epoch (KIP-320): -1 skips the check."""
        if current_leader_epoch < 0 or current_leader_epoch == self.leader_epoch:
            return ErrorCode.NONE
        if current_leader_epoch < self.leader_epoch:
            return ErrorCode.FENCED_LEADER_EPOCH
        return ErrorCode.UNKNOWN_LEADER_EPOCH

    # --- the leader's view of its followers -------------------------------------------------

    def become_leader(self, state: PartitionState) -> None:
        now = clock.monotonic_ms()
        # ISR members count as caught up now: they get replica.lag.time.max.ms to show it
        self.followers = {r: FollowerState(last_caught_up_ms=now) for r in state.replicas if r != self.manager.node_id}
        # written now, made durable with the others taken meanwhile in one sync (a failover takes thousands);
        # nothing of this epoch is acknowledged before (wait_for_replication, wait_for_epoch_checkpoint)
        if self.log.leader_epochs.assign(state.leader_epoch, self.log.log_end_offset, sync=False):
            self.manager.epoch_checkpoint_unsynced(self.log)
        self.epoch_start_offset = self.log.log_end_offset
        self._fail_waiters()  # those of an earlier epoch: what they wait for may have been cut since
        if state.unclean:
            log.warning("%s-%d: elected by unclean leader election at epoch %d; this replica's log ends at "
                        "offset %d, and records other replicas had past it are lost",
                        self.topic, self.index, state.leader_epoch, self.log.log_end_offset)
        self.maybe_advance_high_watermark()

    def follower_fetched(self, replica_id: int, fetch_offset: int, settled_in: tuple | None = None) -> None:
        """A follower's fetch at ``fetch_offset``: it holds everything below it. A fetch past this log's end
        (a tail the follower has not truncated yet) is answered OFFSET_OUT_OF_RANGE and tells nothing.
        ``settled_in``: the follower's fetch session and its key of this partition, if it has one."""
        follower = self.followers.get(replica_id)
        if follower is None or fetch_offset > self.log.log_end_offset:
            return
        now = clock.monotonic_ms()
        leader_end = self.log.log_end_offset
        if follower.settled_in is not None and follower.settled_in == settled_in:
            # the session's fetches since the last look were caught-up fetches of this partition: the one
            # before this is the latest (a change since would have had this partition looked at then)
            follower.last_caught_up_ms = follower.last_fetch_ms = max(follower.last_fetch_ms,
                                                                      settled_in[0].previous_fetch_ms)
        follower.settled_in = settled_in if fetch_offset >= leader_end else None
        if fetch_offset >= leader_end:
            follower.last_caught_up_ms = now
        elif fetch_offset >= follower.leader_end_at_last_fetch:
            follower.last_caught_up_ms = max(follower.last_caught_up_ms, follower.last_fetch_ms)
        stages.mark("follower-fetch", self.topic, self.index, fetch_offset, replica_id)
        follower.log_end_offset = fetch_offset
        follower.last_fetch_ms = now
        follower.leader_end_at_last_fetch = leader_end
        if replica_id not in self.state.isr and self._may_join_isr(fetch_offset):
            self.manager.change_isr(self, self.state.isr + (replica_id,))
        self.maybe_advance_high_watermark()

    def maybe_expand_isr(self, max_lag_ms: int) -> None:
        """The periodic check's second look at a short ISR: a follower out of it that is caught up and fetching
        joins it, even if no fetch of it has named this partition since (an idle partition's)."""
        now = clock.monotonic_ms()
        for replica_id, follower in self.followers.items():
            if replica_id not in self.state.isr and follower.log_end_offset >= self.log.log_end_offset \
                    and now - follower.caught_up_ms() <= max_lag_ms and self._may_join_isr(follower.log_end_offset):
                self.manager.change_isr(self, self.state.isr + (replica_id,))
                return

    def _may_join_isr(self, fetch_offset: int) -> bool:
        """Caught up to the high watermark, and past the start of the current leader epoch (as in Kafka)."""
        epoch_start = self.log.leader_epochs.entries[-1].start_offset if self.log.leader_epochs.entries else 0
        return fetch_offset >= self.high_watermark and fetch_offset >= epoch_start

    def lagging_isr_members(self, max_lag_ms: int) -> list[int]:
        now = clock.monotonic_ms()
        return [r for r in self.state.isr if r in self.followers and now - self.followers[r].caught_up_ms() > max_lag_ms]

    def maybe_advance_high_watermark(self) -> None:
        if not self.is_leader:
            return
        ends = [self.log.log_end_offset]
        ends += [self.followers[r].log_end_offset if r in self.followers else -1
                 for r in set(self.state.isr) | set(self.proposed_isr) if r != self.manager.node_id]
        candidate = min(ends)
        if candidate > self.high_watermark:
            stages.mark("high-watermark", self.topic, self.index, candidate)
            self.log.set_high_watermark(candidate)
            self._complete_waiters()
            if self.manager.answered:
                self.manager.write_answers()
            self.manager.broker.fetch_purgatory.check_and_complete(self.log)  # consumers waiting for it

    # --- delayed produce (acks=all) -----------------------------------------------------------

    def watch_high_watermark(self, offset: int, leader_epoch: int, reached: Callable[[bool], None]) -> None:
        """``reached(True)`` once the high watermark reaches ``offset`` while this broker still leads at
        ``leader_epoch`` (the epoch of the append), ``reached(False)`` once that leadership is over -- even if
        it leads again later: its log may have been truncated and refilled in between. Called in the turn
        that decides it (the follower fetch that moves the high watermark), at once if decided already."""
        if not self.is_leader or self.leader_epoch != leader_epoch:
            reached(False)
        elif self.high_watermark >= offset:
            reached(True)
        else:
            heapq.heappush(self._hw_waiters, (offset, next(_arrivals), leader_epoch, reached))

    def replication_error(self, reached: bool, leader_epoch: int) -> ErrorCode:
        """What the writer of an acks=all append at ``leader_epoch`` is told: NONE once committed (``reached``),
        else REQUEST_TIMED_OUT while that leadership lasts, NOT_LEADER_OR_FOLLOWER after it."""
        if reached:
            if len(self.state.isr) < self.log.config.min_insync_replicas:
                return ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
            return ErrorCode.NONE
        return self.leadership_error(leader_epoch)

    def leadership_error(self, leader_epoch: int) -> ErrorCode:
        """A write of the leadership at ``leader_epoch`` not acknowledged (yet): REQUEST_TIMED_OUT while that
        leadership lasts, NOT_LEADER_OR_FOLLOWER after it."""
        if self.is_leader and self.leader_epoch == leader_epoch:
            return ErrorCode.REQUEST_TIMED_OUT
        return ErrorCode.NOT_LEADER_OR_FOLLOWER

    async def wait_for_high_watermark(self, offset: int, leader_epoch: int, timeout_s: float) -> bool:
        """watch_high_watermark's answer, False at the timeout."""
        # (a wait that timed out leaves the heap when the high watermark passes it)
        return await _answer_of(lambda answer: self.watch_high_watermark(offset, leader_epoch, answer), timeout_s)

    async def wait_for_replication(self, offset: int, leader_epoch: int, timeout_s: float) -> ErrorCode:
        """acks=all once appended below ``offset`` at ``leader_epoch``: the error its writer gets (NONE once
        committed and the leadership's epoch checkpoint is durable)."""
        if delay := self.manager.replication_wait_delay_s:
            self.log_wait_delay(offset, delay)
            await clock.sleep(delay)
        started = clock.monotonic()
        error = self.replication_error(await self.wait_for_high_watermark(offset, leader_epoch, timeout_s),
                                       leader_epoch)
        if error:
            return error
        return await self.wait_for_epoch_checkpoint(leader_epoch, max(0.0, timeout_s - (clock.monotonic() - started)))

    def log_wait_delay(self, offset: int, delay_s: float) -> None:
        log.warning("%s-%d: fault injection (%s): the wait for offset %d starts in %.1fs", self.topic, self.index,
                    faults.DELAY_REPLICATION_WAIT_ENV, offset, delay_s)

    # --- the leader-epoch checkpoint of a leadership just taken (KIP-101) ----------------------------------

    def epoch_checkpoint_synced(self) -> bool:
        return self.log not in self.manager.unsynced_epochs

    def when_epoch_checkpoint_synced(self, synced: Callable[[], None]) -> None:
        """``synced()`` once this log's leader-epoch checkpoint is durable: at once if it is."""
        pending = self.manager.unsynced_epochs.get(self.log)
        if pending is None:
            synced()
        else:
            pending.add_done_callback(lambda _: synced())

    async def wait_for_epoch_checkpoint(self, leader_epoch: int, timeout_s: float) -> ErrorCode:
        """Before a write of this leadership is acknowledged, its leader-epoch checkpoint is durable (KIP-101:
        a restart must know where the epoch began): NONE then, else the error its writer gets."""
        if not self.epoch_checkpoint_synced() and not await _answer_of(
                lambda answer: self.when_epoch_checkpoint_synced(lambda: answer(True)), timeout_s):
            return ErrorCode.REQUEST_TIMED_OUT
        return self.durable_error(leader_epoch)

    def durable_error(self, leader_epoch: int) -> ErrorCode:
        """A write of the leadership at ``leader_epoch``, committed with its epoch checkpoint durable: NONE while
        that leadership lasts, NOT_LEADER_OR_FOLLOWER after it."""
        return ErrorCode.NONE if self.is_leader and self.leader_epoch == leader_epoch else \
            ErrorCode.NOT_LEADER_OR_FOLLOWER

    def _complete_waiters(self) -> None:
        """The waits the high watermark has reached: True for those of this leadership."""
        hw = self.high_watermark
        waiters = self._hw_waiters
        while waiters and waiters[0][0] <= hw:
            _, _, epoch, reached = heapq.heappop(waiters)
            reached(self.is_leader and epoch == self.leader_epoch)

    def _fail_waiters(self) -> None:
        """A leadership began or ended: the waits of any other leadership fail."""
        keep = []
        failed = []
        for entry in self._hw_waiters:
            (keep if self.is_leader and entry[2] == self.leader_epoch else failed).append(entry)
        heapq.heapify(keep)
        self._hw_waiters = keep
        for entry in failed:
            entry[3](False)

    def apply(self, state: PartitionState) -> None:
        """A new state from the store: take up the role it gives this broker."""
        old = self.state
        self.state = state
        self.log.notify_watchers()  # a fetch session's leadership answers (errors, epochs) may change
        self.proposed_isr = ()  # written (and now in ``state``) or lost to this newer state
        me = self.manager.node_id
        if state.leader == me and (old.leader != me or old.leader_epoch != state.leader_epoch):
            self.manager.role_taken("leader", f"{self.topic}-{self.index} at epoch {state.leader_epoch}")
            self.become_leader(state)
            self.manager.broker.leadership_changed(self.topic, self.index, True, state.leader_epoch)
        elif state.leader != me and old.leader == me:
            self.manager.role_taken("no longer leader", f"{self.topic}-{self.index} (leader {state.leader}, epoch "
                                                        f"{state.leader_epoch})")
            self.followers = {}
            self.epoch_start_offset = None
            self._fail_waiters()
            self.manager.broker.leadership_changed(self.topic, self.index, False, state.leader_epoch)
        elif state.leader == me:
            # an ISR change under this leader, its own or the controller's (a follower gone)
            self.manager.isr_shrinks += bool(set(old.isr) - set(state.isr))
            self.manager.isr_expands += bool(set(state.isr) - set(old.isr))
            # a reassignment adds followers (tracked from their first fetch) or takes them away
            now = clock.monotonic_ms()
            self.followers = {r: self.followers.get(r) or FollowerState(last_caught_up_ms=now)
                              for r in state.replicas if r != me}
            self.maybe_advance_high_watermark()  # an ISR that shrank may let the high watermark move


async def _answer_of(watch: Callable[[Callable[[bool], None]], None], timeout_s: float) -> bool:
    """The first answer ``watch`` gives the callback it is handed, False at the timeout."""
    fut = asyncio.get_running_loop().create_future()
    watch(lambda ok: fut.done() or fut.set_result(ok))
    timer = clock.call_later(timeout_s, lambda: fut.done() or fut.set_result(False))
    try:
        return await fut
    finally:
        timer.cancel()
