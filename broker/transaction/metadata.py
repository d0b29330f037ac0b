"""TransactionMetadata: the coordinator's state of one transactional id, and its state machine.

Empty -> Ongoing (partitions added) -> PrepareCommit | PrepareAbort (EndTxn,
or a timeout) -> CompleteCommit | CompleteAbort (every marker written) ->
Ongoing again with the next transaction, or Empty after InitProducerId.
Every change is first computed as a TxnTransitMetadata, written to
__transaction_state, and only then applied, so the log never lags behind
what clients were told.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from typing import NamedTuple

from protocol.records import NO_PRODUCER_ID

TopicPartition = tuple[str, int]

NO_PRODUCER_EPOCH = -1
NO_START_TIME = -1
MAX_EPOCH = 0x7FFF


class TransactionState(IntEnum):
    """The states and their ids in TransactionLog values."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def wire_name(self) -> str:
        """The name DescribeTransactions and ListTransactions use: "PrepareCommit"."""
        return "".join(word.capitalize() for word in self.name.split("_"))

    @classmethod
    def from_wire_name(cls, name: str) -> "TransactionState | None":
        return next((state for state in cls if state.wire_name == name), None)


EMPTY = TransactionState.EMPTY
ONGOING = TransactionState.ONGOING
PREPARE_COMMIT = TransactionState.PREPARE_COMMIT
PREPARE_ABORT = TransactionState.PREPARE_ABORT
COMPLETE_COMMIT = TransactionState.COMPLETE_COMMIT
COMPLETE_ABORT = TransactionState.COMPLETE_ABORT

PREPARING = (PREPARE_COMMIT, PREPARE_ABORT)
COMPLETED = (EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT)  # no transaction open: a new one may begin

# state -> the states it may be entered from
_VALID_PREVIOUS = {
    EMPTY: set(COMPLETED),
    ONGOING: {ONGOING, *COMPLETED},
    PREPARE_COMMIT: {ONGOING},
    PREPARE_ABORT: {ONGOING, *COMPLETED},  # from a completed state: transaction version 2's empty abort
    COMPLETE_COMMIT: {PREPARE_COMMIT},
    COMPLETE_ABORT: {PREPARE_ABORT},
}


def _bumped(epoch: int) -> int:
    """The next epoch, at most the largest: a producer id whose epochs are used up is replaced
    (InitProducerId, or EndTxn of transaction version 2) before another bump is needed."""
    return min(epoch + 1, MAX_EPOCH)


class InvalidTransition(RuntimeError):
    """A coordinator bug: a state change the state machine does not allow."""


class TxnTransitMetadata(NamedTuple):
    """What a transactional id becomes once the change is in the log."""

    producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    timeout_ms: int
    state: TransactionState
    partitions: frozenset[TopicPartition]
    start_ms: int
    last_update_ms: int
    next_producer_id: int = NO_PRODUCER_ID
    previous_producer_id: int = NO_PRODUCER_ID


@dataclass(eq=False)
class TransactionMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TransactionState = EMPTY
    partitions: frozenset[TopicPartition] = field(default_factory=frozenset)
    start_ms: int = NO_START_TIME  # when the open transaction began
    last_update_ms: int = NO_START_TIME
    # The epoch before the last bump: a producer retrying InitProducerId with it gets the
    # current epoch again rather than a fence. Kept in memory only, as Kafka does.
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    # Transaction version 2 bumps the epoch at every EndTxn; when that uses up the epochs, the
    # producer goes on with a new id once the markers are in (next), and a retry of that EndTxn
    # names the old one (previous).
    next_producer_id: int = NO_PRODUCER_ID
    previous_producer_id: int = NO_PRODUCER_ID

    def __repr__(self) -> str:
        return (f"<transaction {self.transactional_id} {self.state.wire_name} "
                f"producer {self.producer_id} epoch {self.producer_epoch}>")

    @property
    def epoch_exhausted(self) -> bool:
        # one epoch is kept in reserve for fencing an open transaction
        return self.producer_epoch >= MAX_EPOCH - 1

    def _transit(self, state: TransactionState, now: int, **changes) -> TxnTransitMetadata:
        if self.state not in _VALID_PREVIOUS[state]:
            raise InvalidTransition(f"{self}: {self.state.wire_name} -> {state.wire_name}")
        values = {
            "producer_id": self.producer_id, "producer_epoch": self.producer_epoch,
            "last_producer_epoch": self.last_producer_epoch, "timeout_ms": self.timeout_ms,
            "partitions": self.partitions, "start_ms": self.start_ms,
            "next_producer_id": self.next_producer_id, "previous_producer_id": self.previous_producer_id,
        }
        values.update(changes)
        return TxnTransitMetadata(state=state, last_update_ms=now, **values)

    def prepare_epoch_bump(self, timeout_ms: int, expected_epoch: int | None, now: int) -> TxnTransitMetadata | None:
        """InitProducerId: the next epoch, or None when ``expected_epoch`` shows a fenced producer.

        A new producer (no expected epoch) fences every older one. A producer
        naming its epoch (KIP-360) gets the next one; naming the epoch before
        the last bump means it is retrying, and it gets the current one again.
        """
        if expected_epoch is None:
            epoch, last = self.producer_epoch + 1, NO_PRODUCER_EPOCH
        elif expected_epoch == self.producer_epoch or self.producer_epoch == NO_PRODUCER_EPOCH:
            epoch, last = self.producer_epoch + 1, self.producer_epoch
        elif expected_epoch == self.last_producer_epoch:
            epoch, last = self.producer_epoch, self.last_producer_epoch
        else:
            return None
        return self._transit(EMPTY, now, producer_epoch=epoch, last_producer_epoch=last, timeout_ms=timeout_ms,
                             partitions=frozenset(), start_ms=NO_START_TIME)

    def prepare_producer_id_rotation(self, producer_id: int, timeout_ms: int, now: int) -> TxnTransitMetadata:
        """InitProducerId once the epochs of the producer id are used up: a new id at epoch 0."""
        return self._transit(EMPTY, now, producer_id=producer_id, producer_epoch=0,
                             last_producer_epoch=NO_PRODUCER_EPOCH, timeout_ms=timeout_ms,
                             partitions=frozenset(), start_ms=NO_START_TIME)

    def prepare_add_partitions(self, partitions: set[TopicPartition], now: int) -> TxnTransitMetadata:
        start = self.start_ms if self.state == ONGOING else now
        return self._transit(ONGOING, now, partitions=self.partitions | partitions, start_ms=start)

    def prepare_end(self, committed: bool, now: int, bump_epoch: bool = False,
                    next_producer_id: int = NO_PRODUCER_ID) -> TxnTransitMetadata:
        """EndTxn; with transaction version 2 the epoch is bumped, so the markers carry the new
        epoch and fence any late write of this transaction, and ``next_producer_id`` takes over
        once they are in when the epochs are used up."""
        state = PREPARE_COMMIT if committed else PREPARE_ABORT
        if not bump_epoch:
            return self._transit(state, now)
        return self._transit(state, now, producer_epoch=_bumped(self.producer_epoch),
                             last_producer_epoch=self.producer_epoch, next_producer_id=next_producer_id)

    def prepare_fenced_abort(self, now: int) -> TxnTransitMetadata:
        """Abort on behalf of the coordinator (timeout, or a new producer incarnation) with the
        epoch bumped, so the old producer is fenced in every partition the markers reach."""
        return self._transit(PREPARE_ABORT, now, producer_epoch=_bumped(self.producer_epoch),
                             last_producer_epoch=NO_PRODUCER_EPOCH)

    def prepare_complete(self, now: int) -> TxnTransitMetadata:
        """Every marker is written: the transaction is over and holds no partitions any more."""
        state = COMPLETE_COMMIT if self.state == PREPARE_COMMIT else COMPLETE_ABORT
        if self.next_producer_id != NO_PRODUCER_ID:  # transaction version 2 used up the epochs
            return self._transit(state, now, partitions=frozenset(), producer_id=self.next_producer_id,
                                 producer_epoch=0, last_producer_epoch=NO_PRODUCER_EPOCH,
                                 next_producer_id=NO_PRODUCER_ID, previous_producer_id=self.producer_id)
        return self._transit(state, now, partitions=frozenset())

    def complete_transition(self, transit: TxnTransitMetadata) -> None:
        self.next_producer_id = transit.next_producer_id
        self.previous_producer_id = transit.previous_producer_id
        self.producer_id = transit.producer_id
        self.producer_epoch = transit.producer_epoch
        self.last_producer_epoch = transit.last_producer_epoch
        self.timeout_ms = transit.timeout_ms
        self.state = transit.state
        self.partitions = transit.partitions
        self.start_ms = transit.start_ms
        self.last_update_ms = transit.last_update_ms
