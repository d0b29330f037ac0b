"""TransactionCoordinator: Kafka's transaction protocol (KIP-98) for the transactional ids of the
__transaction_state partitions this broker leads.

InitProducerId gives a transactional id its producer id and a new epoch,
fencing older incarnations; an open transaction of one of them is aborted
first (the new one is told CONCURRENT_TRANSACTIONS and retries).
AddPartitionsToTxn and AddOffsetsToTxn make the transaction Ongoing over a
growing set of partitions. EndTxn writes PrepareCommit or PrepareAbort and
answers once that is in __transaction_state; the markers then go out to
every partition (TransactionMarkerChannelManager), and CompleteCommit or
CompleteAbort is written when all are in. Until then the next transactional
request of that id gets CONCURRENT_TRANSACTIONS. With transaction version 2
(EndTxn v5, KIP-890 part 2) every EndTxn bumps the epoch, and Produce v12
and TxnOffsetCommit v5 add their partitions themselves.

Loop timers do the housekeeping: transactions open longer than their
timeout are aborted with the epoch bumped (so the zombie producer is
fenced), ids idle for transactional.id.expiration.ms are removed with a
tombstone, and partitions whose last stable offset is stuck for longer than
any transaction may last are logged (LastStableOffsetWatch).

A partition's ids are loaded when this broker becomes its leader, at whose
leader epoch it coordinates them (Kafka's coordinator epoch, carried by its
markers); a transaction found in PrepareCommit or PrepareAbort then has its
markers sent again and is completed. Losing the leadership unloads them and
stops their markers: the next coordinator sends them. Requests are answered
once what they wrote is committed, and markers go out only for a committed
PrepareCommit or PrepareAbort, so no new coordinator finds a transaction
Ongoing whose markers were written.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from typing import Callable

from broker.coordinator.internal_topics import OFFSETS_TOPIC
from broker.coordinator.partitions import OwnedPartitions, Pending, settled
from broker.errors import ErrorCode
from broker.transaction.producer_ids import ProducerIdManager
from protocol.records import NO_PRODUCER_ID
from storage import clock
from storage.log_manager import LogManager

from ..coordinator.internal_topics import TRANSACTION_STATE_TOPIC
from .lso_watch import LastStableOffsetWatch
from .markers import BrokerChannel, TransactionMarkerChannelManager
from .metadata import (
    COMPLETE_ABORT,
    COMPLETE_COMMIT,
    COMPLETED,
    EMPTY,
    MAX_EPOCH,
    NO_PRODUCER_EPOCH,
    ONGOING,
    PREPARE_ABORT,
    PREPARE_COMMIT,
    PREPARING,
    TopicPartition,
    TransactionMetadata,
    TransactionState,
    TxnTransitMetadata,
)
from .state_manager import TransactionStateManager

COMPLETE_RETRY_S = 1.0
# The transaction version (KIP-890) finalized in ApiVersions: 2 bumps the epoch at every EndTxn of a
# client that speaks it (EndTxn v5+); Produce v12+ and TxnOffsetCommit v5+ add partitions themselves.
TRANSACTION_VERSION = 2
SUMMARY_INTERVAL_MS = 60_000  # how often committed and aborted transactions are counted in one INFO line

log = logging.getLogger("moldau.transaction")


def fenced_for_version(error: ErrorCode, version: int, fenced_since: int) -> ErrorCode:
    """Clients of request versions before ``fenced_since`` know PRODUCER_FENCED (KIP-588)
    only as INVALID_PRODUCER_EPOCH."""
    if error == ErrorCode.PRODUCER_FENCED and version < fenced_since:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    return error


class TransactionCoordinator:
    def __init__(self, logs: LogManager, replicas, config, producer_ids: ProducerIdManager,
                 partition_leader: Callable[[str, int], int | None], notify_append: Callable[[str, int], None],
                 supervisor):
        self.config = config
        self.supervisor = supervisor
        self.producer_ids = producer_ids
        self.partition_leader = partition_leader
        self.state_manager = TransactionStateManager(logs, replicas, config, notify_append)
        self.transactions: dict[str, TransactionMetadata] = {}
        self.partitions = OwnedPartitions(TRANSACTION_STATE_TOPIC, supervisor)
        self.markers: TransactionMarkerChannelManager | None = None
        # stuck past the longest timeout, plus the time the coordinator may take to notice it ran out
        self.lso_watch = LastStableOffsetWatch(logs, config["transaction.max.timeout.ms"]
                                               + config["transaction.abort.timed.out.transaction.cleanup.interval.ms"])
        self._tasks: dict[str, asyncio.Task] = {}  # transactional id -> its markers and completion
        self.completed = Counter()  # True: committed, False: aborted, since the last summary line

    def start(self, channel: BrokerChannel) -> None:
        """Finish what the previous coordinator left and arm the housekeeping timers (on the running loop)."""
        self.markers = TransactionMarkerChannelManager(channel, self.partition_leader, self.supervisor)
        self._complete_prepared(self.transactions.values())
        self._schedule("transaction-abort", "transaction.abort.timed.out.transaction.cleanup.interval.ms",
                       self._abort_timed_out_transactions)
        self._schedule("transactionalId-expiration", "transaction.remove.expired.transaction.cleanup.interval.ms",
                       self._remove_expired_transactional_ids)
        self.supervisor.every("transaction-summary", lambda: SUMMARY_INTERVAL_MS / 1000, self.log_summary)
        # checked as often as timed-out transactions are: a stuck LSO is one that outlived their abort
        self._schedule("late-transactions-check", "transaction.abort.timed.out.transaction.cleanup.interval.ms",
                       lambda: self.lso_watch.check(clock.wall_ms()))

    # ---- the partitions this broker leads -------------------------------------------

    def on_election(self, partition: int, epoch: int) -> None:
        self.partitions.elect(partition, epoch, self._load)

    async def _load(self, partition: int) -> None:
        loaded = await self.state_manager.load_partition(partition)
        self.transactions.update(loaded)
        if self.markers is not None:  # else start() does it
            self._complete_prepared(loaded.values())

    def _complete_prepared(self, transactions) -> None:
        for txn in transactions:
            if txn.state in PREPARING and txn.transactional_id not in self._tasks:
                log.info("completing %r left by the previous coordinator: sending its markers again", txn)
                self._write_markers(txn)

    def on_resignation(self, partition: int) -> None:
        """Another broker leads the partition now: its ids, and their markers, are its coordinator's."""
        if not self.partitions.resign(partition):
            return
        unloaded = [t for t in self.transactions if self.state_manager.partition_for(t) == partition]
        for transactional_id in unloaded:
            del self.transactions[transactional_id]
            task = self._tasks.pop(transactional_id, None)
            if task is not None:
                task.cancel()
        log.info("unloaded %d transactional ids of %s-%d", len(unloaded), TRANSACTION_STATE_TOPIC, partition)

    def coordinator_error(self, transactional_id: str) -> ErrorCode:
        """NONE if this broker coordinates the id now, else COORDINATOR_LOAD_IN_PROGRESS or NOT_COORDINATOR."""
        return self.partitions.error(self.state_manager.partition_for(transactional_id))

    def coordinator_epoch(self, transactional_id: str) -> int:
        """The leader epoch of the id's partition this broker coordinates it at (Kafka's coordinator epoch)."""
        return self.partitions.epoch(self.state_manager.partition_for(transactional_id))

    def committed(self, transactional_id: str, error: ErrorCode = ErrorCode.NONE) -> Pending:
        """``error``, or what to answer once the id's writes so far are committed (acks=all); an answer at
        once when nothing is to wait for, so a standalone broker answers in the same turn."""
        if error != ErrorCode.NONE:
            return error
        return self.state_manager.committed(transactional_id)

    def log_summary(self) -> None:
        """One INFO line for the transactions completed since the last one (none: no line)."""
        if self.completed:
            log.info("transactions completed since the last summary: %d committed, %d aborted",
                     self.completed[True], self.completed[False])
            self.completed.clear()

    # ---- InitProducerId -----------------------------------------------------------

    def init_producer_id(self, transactional_id: str, timeout_ms: int, expected_producer_id: int,
                         expected_epoch: int) -> tuple[ErrorCode, int, int]:
        """(error, producer id, epoch); ``expected_producer_id`` -1 when the producer names none (KIP-360)."""
        if not transactional_id:
            return ErrorCode.INVALID_REQUEST, NO_PRODUCER_ID, NO_PRODUCER_EPOCH
        if error := self.coordinator_error(transactional_id):
            return error, NO_PRODUCER_ID, NO_PRODUCER_EPOCH
        if not 0 < timeout_ms <= self.config["transaction.max.timeout.ms"]:
            return ErrorCode.INVALID_TRANSACTION_TIMEOUT, NO_PRODUCER_ID, NO_PRODUCER_EPOCH
        expected = None if expected_producer_id < 0 else expected_epoch
        txn = self.transactions.get(transactional_id)
        now = clock.wall_ms()
        if txn is None:
            if (producer_id := self.producer_ids.generate()) is None:
                return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, NO_PRODUCER_ID, NO_PRODUCER_EPOCH
            txn = TransactionMetadata(transactional_id, producer_id, NO_PRODUCER_EPOCH, timeout_ms)
            transit = txn.prepare_epoch_bump(timeout_ms, None, now)
        elif txn.state in PREPARING:
            return ErrorCode.CONCURRENT_TRANSACTIONS, NO_PRODUCER_ID, NO_PRODUCER_EPOCH
        elif expected is not None and expected_producer_id != txn.producer_id:
            return ErrorCode.PRODUCER_FENCED, NO_PRODUCER_ID, NO_PRODUCER_EPOCH
        elif txn.state == ONGOING:
            # The previous incarnation left a transaction open: abort it first. The caller retries
            # on CONCURRENT_TRANSACTIONS and then gets an epoch above the fenced one.
            log.info("aborting the open transaction of %r for a new InitProducerId", txn)
            error = self._prepare_end(txn, txn.prepare_fenced_abort(now))
            return (error or ErrorCode.CONCURRENT_TRANSACTIONS), NO_PRODUCER_ID, NO_PRODUCER_EPOCH
        elif txn.epoch_exhausted and expected in (None, txn.producer_epoch):
            if (producer_id := self.producer_ids.generate()) is None:
                return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, NO_PRODUCER_ID, NO_PRODUCER_EPOCH
            transit = txn.prepare_producer_id_rotation(producer_id, timeout_ms, now)
        else:
            transit = txn.prepare_epoch_bump(timeout_ms, expected, now)
            if transit is None:
                return ErrorCode.PRODUCER_FENCED, NO_PRODUCER_ID, NO_PRODUCER_EPOCH
        error = self._write(txn, transit, now)
        if error:
            return error, NO_PRODUCER_ID, NO_PRODUCER_EPOCH
        self.transactions[transactional_id] = txn
        return ErrorCode.NONE, txn.producer_id, txn.producer_epoch

    def owns_producer_id(self, producer_id: int) -> bool:
        """Whether a transactional id holds ``producer_id``, which then no idempotent producer may use."""
        return any(txn.producer_id == producer_id for txn in self.transactions.values())

    # ---- the transaction's partitions --------------------------------------------

    def _producer(self, transactional_id: str, producer_id: int, epoch: int
                  ) -> tuple[ErrorCode, TransactionMetadata | None]:
        """The id's metadata if the request comes from its current producer."""
        if not transactional_id:
            return ErrorCode.INVALID_REQUEST, None
        if error := self.coordinator_error(transactional_id):
            return error, None
        txn = self.transactions.get(transactional_id)
        if txn is not None and txn.next_producer_id != NO_PRODUCER_ID and producer_id == txn.next_producer_id:
            return ErrorCode.CONCURRENT_TRANSACTIONS, None  # the id after an epoch overflow: its markers are on their way
        if txn is None or txn.producer_id != producer_id:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING, None
        if txn.producer_epoch != epoch:
            return ErrorCode.PRODUCER_FENCED, None
        return ErrorCode.NONE, txn

    def add_partitions(self, transactional_id: str, producer_id: int, epoch: int,
                       partitions: set[TopicPartition]) -> ErrorCode:
        error, txn = self._producer(transactional_id, producer_id, epoch)
        if error:
            return error
        if txn.state in PREPARING:
            return ErrorCode.CONCURRENT_TRANSACTIONS
        if txn.state == ONGOING and partitions <= txn.partitions:
            return ErrorCode.NONE
        now = clock.wall_ms()
        return self._write(txn, txn.prepare_add_partitions(partitions, now), now)

    def add_offsets(self, transactional_id: str, producer_id: int, epoch: int, group_id: str,
                    offsets_partition: int) -> ErrorCode:
        """AddOffsetsToTxn: the group's partition of __consumer_offsets joins the transaction."""
        if not group_id:
            return ErrorCode.INVALID_GROUP_ID
        return self.add_partitions(transactional_id, producer_id, epoch, {(OFFSETS_TOPIC, offsets_partition)})

    def verify_partitions(self, transactional_id: str, producer_id: int, epoch: int,
                          partitions: list[TopicPartition]) -> dict[TopicPartition, ErrorCode]:
        """Whether the producer's open transaction holds each partition (KIP-890's verification).

        Asked before a transactional batch or offset commit is written, so a
        producer cannot write where the coordinator would send no marker.
        """
        error, txn = self._producer(transactional_id, producer_id, epoch)
        if not error and txn.state in PREPARING:
            error = ErrorCode.CONCURRENT_TRANSACTIONS
        if error:
            return dict.fromkeys(partitions, error)
        return {tp: ErrorCode.NONE if tp in txn.partitions else ErrorCode.INVALID_TXN_STATE for tp in partitions}

    # ---- EndTxn --------------------------------------------------------------------

    def end_txn_bumping_epoch(self, transactional_id: str, producer_id: int, epoch: int, committed: bool
                              ) -> tuple[ErrorCode, int, int]:
        """EndTxn of transaction version 2: (error, producer id, epoch the producer goes on with).

        The epoch is bumped, so a retry names the epoch before the current one;
        once the epochs are used up, a new producer id takes over at epoch 0.
        An abort naming the current epoch with no transaction open (the
        client's records never reached a partition) bumps the epoch as well.
        Kafka's answers, by state and epoch: retry (epoch + 1 is current) or
        current, abort or commit:

            Empty          abort: fenced / bump    commit: invalid state
            CompleteAbort  abort: done / bump      commit: fenced / invalid state
            CompleteCommit abort: invalid / bump   commit: done / invalid state
        """
        no_producer = NO_PRODUCER_ID, NO_PRODUCER_EPOCH
        if transactional_id and (error := self.coordinator_error(transactional_id)):
            return error, *no_producer
        txn = self.transactions.get(transactional_id) if transactional_id else None
        if txn is None:
            return (ErrorCode.INVALID_REQUEST if not transactional_id else ErrorCode.INVALID_PRODUCER_ID_MAPPING,
                    *no_producer)
        retry_of_overflow = (producer_id == txn.previous_producer_id != NO_PRODUCER_ID
                             and epoch >= MAX_EPOCH - 1 and txn.producer_epoch == 0)
        if producer_id != txn.producer_id and not retry_of_overflow:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING, *no_producer
        if txn.state in PREPARING:
            return ErrorCode.CONCURRENT_TRANSACTIONS, *no_producer  # the last EndTxn's markers are on their way
        if epoch == txn.producer_epoch and not retry_of_overflow:
            if txn.state == ONGOING or not committed:
                return self._end_bumping_epoch(txn, committed)
            log.info("EndTxn(commit) for %r refused: no transaction is open", txn)
            return ErrorCode.INVALID_TXN_STATE, *no_producer
        if txn.state == ONGOING or not (epoch + 1 == txn.producer_epoch or retry_of_overflow):
            return ErrorCode.PRODUCER_FENCED, *no_producer
        # a retry of the last EndTxn
        if txn.state == (COMPLETE_COMMIT if committed else COMPLETE_ABORT):
            return ErrorCode.NONE, txn.producer_id, txn.producer_epoch
        if txn.state == COMPLETE_ABORT or txn.state == EMPTY and not committed:  # e.g. racing a timeout's abort
            return ErrorCode.PRODUCER_FENCED, *no_producer
        log.info("EndTxn(%s) for %r refused", "commit" if committed else "abort", txn)
        return ErrorCode.INVALID_TXN_STATE, *no_producer

    def _end_bumping_epoch(self, txn: TransactionMetadata, committed: bool) -> tuple[ErrorCode, int, int]:
        next_producer_id = NO_PRODUCER_ID
        if txn.epoch_exhausted and (next_producer_id := self.producer_ids.generate()) is None:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, NO_PRODUCER_ID, NO_PRODUCER_EPOCH
        error = self._prepare_end(txn, txn.prepare_end(committed, clock.wall_ms(), True, next_producer_id))
        if error:
            return error, NO_PRODUCER_ID, NO_PRODUCER_EPOCH
        if next_producer_id != NO_PRODUCER_ID:
            return ErrorCode.NONE, next_producer_id, 0
        return ErrorCode.NONE, txn.producer_id, txn.producer_epoch

    def end_txn(self, transactional_id: str, producer_id: int, epoch: int, committed: bool) -> ErrorCode:
        """EndTxn of transaction version 1: the epoch stays."""
        error, txn = self._producer(transactional_id, producer_id, epoch)
        if error:
            return error
        wanted = (PREPARE_COMMIT, COMPLETE_COMMIT) if committed else (PREPARE_ABORT, COMPLETE_ABORT)
        if txn.state == ONGOING:
            return self._prepare_end(txn, txn.prepare_end(committed, clock.wall_ms()))
        if txn.state == wanted[0]:
            return ErrorCode.CONCURRENT_TRANSACTIONS  # a retry while the markers are on their way
        if txn.state == wanted[1]:
            return ErrorCode.NONE  # a retry of an EndTxn that completed
        log.info("EndTxn(%s) for %r refused", "commit" if committed else "abort", txn)
        return ErrorCode.INVALID_TXN_STATE

    def _prepare_end(self, txn: TransactionMetadata, transit: TxnTransitMetadata) -> ErrorCode:
        """Write PrepareCommit or PrepareAbort; once it is in the log, send the markers."""
        error = self._write(txn, transit, transit.last_update_ms)
        if not error:
            self._write_markers(txn)
        return error

    def _write_markers(self, txn: TransactionMetadata) -> None:
        task = self.supervisor.spawn(self._complete(  # (an error it did not expect is logged)
            txn, txn.producer_id, txn.producer_epoch, txn.state == PREPARE_COMMIT, txn.partitions))
        self._tasks[txn.transactional_id] = task
        task.add_done_callback(lambda done: self._task_done(txn.transactional_id, done))

    async def _complete(self, txn: TransactionMetadata, producer_id: int, epoch: int, committed: bool,
                        partitions: frozenset[TopicPartition]) -> None:
        """Markers once PrepareCommit/PrepareAbort is committed, then CompleteCommit/CompleteAbort.
        Losing the partition's leadership cancels this; the next coordinator starts it over."""
        tid = txn.transactional_id
        while (error := await settled(self.state_manager.committed(tid))) != ErrorCode.NONE:
            if error == ErrorCode.NOT_COORDINATOR:
                return  # (being unloaded)
            log.warning("%r: its %s is not committed yet (%s); waiting", txn, txn.state.wire_name, error.name)
            await clock.sleep(COMPLETE_RETRY_S)
        await self.markers.write_markers(producer_id, epoch, committed, self.coordinator_epoch(tid), partitions)
        while True:
            now = clock.wall_ms()
            error = self._write(txn, txn.prepare_complete(now), now)
            if not error:
                break
            log.error("could not write the completion of %r (%s); retrying", txn, error.name)
            await clock.sleep(COMPLETE_RETRY_S)
        # one line per transaction only at DEBUG: at hundreds a second it would drown the log
        log.debug("%s %r (%d partitions)", "committed" if committed else "aborted", txn, len(partitions))
        self.completed[committed] += 1

    def _task_done(self, transactional_id: str, task: asyncio.Task) -> None:
        if self._tasks.get(transactional_id) is task:
            del self._tasks[transactional_id]
        if not task.cancelled() and task.exception() is not None:
            log.error("sending transaction markers failed", exc_info=task.exception())

    def _write(self, txn: TransactionMetadata, transit: TxnTransitMetadata, now: int) -> ErrorCode:
        """Append the change to __transaction_state; it takes effect only once it is there."""
        error = self.state_manager.append(txn.transactional_id, transit, now)
        if error:
            log.error("could not write %s of %r: %s", transit.state.wire_name, txn, error.name)
        else:
            txn.complete_transition(transit)
        return error

    # ---- housekeeping ----------------------------------------------------------------

    def _schedule(self, name: str, interval_setting: str, check: Callable[[], None]) -> None:
        self.supervisor.every(name, lambda: self.config[interval_setting] / 1000, check)

    def _abort_timed_out_transactions(self) -> None:
        now = clock.wall_ms()
        for txn in list(self.transactions.values()):
            if txn.state == ONGOING and now - txn.start_ms > txn.timeout_ms:
                log.info("aborting %r: open for %d ms, its timeout is %d ms", txn, now - txn.start_ms, txn.timeout_ms)
                self._prepare_end(txn, txn.prepare_fenced_abort(now))

    def _remove_expired_transactional_ids(self) -> None:
        now = clock.wall_ms()
        expiration = self.config["transactional.id.expiration.ms"]
        for transactional_id, txn in list(self.transactions.items()):
            if txn.state in COMPLETED and now - txn.last_update_ms >= expiration:
                if not self.state_manager.append(transactional_id, None, now):
                    del self.transactions[transactional_id]
                    log.info("removed transactional id %s, unused for %d ms",
                             transactional_id, now - txn.last_update_ms)

    # ---- DescribeTransactions, ListTransactions ---------------------------------------

    def describe(self, transactional_id: str) -> TransactionMetadata | None:
        return self.transactions.get(transactional_id)

    def list_transactions(self, states: set[TransactionState] | None, producer_ids: set[int],
                          min_duration_ms: int) -> list[TransactionMetadata]:
        """Ids matching every filter given: one of ``states`` (None: any), one of ``producer_ids``
        (empty: any), open longer than ``min_duration_ms`` (negative: any)."""
        now = clock.wall_ms()
        return [
            txn for txn in self.transactions.values()
            if (states is None or txn.state in states)
            and (not producer_ids or txn.producer_id in producer_ids)
            and (min_duration_ms < 0 or (txn.state not in COMPLETED and now - txn.start_ms > min_duration_ms))
        ]
