"""The transaction coordinator's state machine (broker/transaction/) in process: Empty -> Ongoing ->
PrepareCommit -> CompleteCommit (and the abort path), the producer fencing rules, and the timeouts that
abort a transaction or forget an id, run by the real Supervisor's timers on the fake clock."""

from __future__ import annotations

import asyncio

import pytest

from broker.config.broker_config import BrokerConfig
from broker.coordinator.partitions import ACTIVE
from broker.errors import ErrorCode
from broker.supervisor import Supervisor
from broker.transaction.coordinator import TransactionCoordinator
from broker.transaction.metadata import InvalidTransition, TransactionMetadata, TransactionState
from broker.transaction.producer_ids import ProducerIdManager
from storage import clock

from .conftest import run

EMPTY, ONGOING = TransactionState.EMPTY, TransactionState.ONGOING
PREPARE_COMMIT, PREPARE_ABORT = TransactionState.PREPARE_COMMIT, TransactionState.PREPARE_ABORT
COMPLETE_COMMIT, COMPLETE_ABORT = TransactionState.COMPLETE_COMMIT, TransactionState.COMPLETE_ABORT
TIMEOUT_MS = 60_000
CHECK_S = 10  # transaction.abort.timed.out.transaction.cleanup.interval.ms


class StateLog:
    """__transaction_state: every write lands and is committed at once."""

    def __init__(self, real) -> None:
        self.partition_for = real.partition_for
        self.written: list[tuple[str, TransactionState | None]] = []

    def append(self, transactional_id, transit, now) -> ErrorCode:
        self.written.append((transactional_id, None if transit is None else transit.state))
        return ErrorCode.NONE

    def committed(self, transactional_id) -> ErrorCode:
        return ErrorCode.NONE


class Markers:
    def __init__(self) -> None:
        self.sent: list[tuple] = []

    async def write_markers(self, producer_id, epoch, committed, coordinator_epoch, partitions) -> None:
        self.sent.append((producer_id, epoch, committed, sorted(partitions)))


class Harness:
    def __init__(self, directory) -> None:
        config = BrokerConfig({})
        self.supervisor = Supervisor()
        self.coordinator = TransactionCoordinator(
            type("Logs", (), {"logs": {}})(), None, config, ProducerIdManager(directory / "producer_ids"),
            lambda topic, partition: 1, lambda *args: None, self.supervisor)
        self.log = self.coordinator.state_manager = StateLog(self.coordinator.state_manager)
        self.coordinator.partitions.states = {
            p: (ACTIVE, 0) for p in range(config["transaction.state.log.num.partitions"])}
        self.coordinator.start(channel=None)
        self.markers = self.coordinator.markers = Markers()

    def init(self, tid="app", timeout_ms=TIMEOUT_MS, expected=(-1, -1)):
        return self.coordinator.init_producer_id(tid, timeout_ms, *expected)

    def txn(self, tid="app") -> TransactionMetadata:
        return self.coordinator.transactions[tid]


def scenario(tmp_path, fake_clock, body):
    async def main():
        harness = Harness(tmp_path)
        try:
            return await asyncio.wait_for(body(harness), 10)
        finally:
            harness.supervisor.stop_all()
    return run(main())


async def settle() -> None:
    for _ in range(10):
        await asyncio.sleep(0)


def test_a_new_transactional_id_gets_a_producer_id_at_epoch_0(tmp_path, fake_clock):
    async def body(h):
        error, producer_id, epoch = h.init()
        assert error == ErrorCode.NONE and producer_id >= 0 and epoch == 0
        assert h.txn().state is EMPTY and h.log.written == [("app", EMPTY)]

    scenario(tmp_path, fake_clock, body)


def test_commit_goes_ongoing_prepare_commit_complete_commit(tmp_path, fake_clock):
    async def body(h):
        _, pid, epoch = h.init()
        assert h.coordinator.add_partitions("app", pid, epoch, {("t", 0), ("t", 1)}) == ErrorCode.NONE
        assert h.txn().state is ONGOING and h.txn().start_ms == clock.wall_ms()
        assert h.coordinator.end_txn("app", pid, epoch, True) == ErrorCode.NONE
        assert h.txn().state is PREPARE_COMMIT
        await settle()
        assert h.txn().state is COMPLETE_COMMIT and h.txn().partitions == frozenset()
        assert h.markers.sent == [(pid, epoch, True, [("t", 0), ("t", 1)])]
        assert [s for _, s in h.log.written] == [EMPTY, ONGOING, PREPARE_COMMIT, COMPLETE_COMMIT]

    scenario(tmp_path, fake_clock, body)


def test_abort_sends_abort_markers_and_completes(tmp_path, fake_clock):
    async def body(h):
        _, pid, epoch = h.init()
        h.coordinator.add_partitions("app", pid, epoch, {("t", 0)})
        assert h.coordinator.end_txn("app", pid, epoch, False) == ErrorCode.NONE
        await settle()
        assert h.txn().state is COMPLETE_ABORT and h.markers.sent == [(pid, epoch, False, [("t", 0)])]

    scenario(tmp_path, fake_clock, body)


def test_end_txn_retries_while_and_after_the_markers_go(tmp_path, fake_clock):
    async def body(h):
        _, pid, epoch = h.init()
        h.coordinator.add_partitions("app", pid, epoch, {("t", 0)})
        h.coordinator.end_txn("app", pid, epoch, True)
        assert h.coordinator.end_txn("app", pid, epoch, True) == ErrorCode.CONCURRENT_TRANSACTIONS
        assert h.coordinator.add_partitions("app", pid, epoch, {("t", 1)}) == ErrorCode.CONCURRENT_TRANSACTIONS
        await settle()
        assert h.coordinator.end_txn("app", pid, epoch, True) == ErrorCode.NONE
        assert h.coordinator.end_txn("app", pid, epoch, False) == ErrorCode.INVALID_TXN_STATE

    scenario(tmp_path, fake_clock, body)


def test_commit_with_no_transaction_open_is_an_invalid_state(tmp_path, fake_clock):
    async def body(h):
        _, pid, epoch = h.init()
        return h.coordinator.end_txn("app", pid, epoch, True)

    assert scenario(tmp_path, fake_clock, body) == ErrorCode.INVALID_TXN_STATE


def test_a_transaction_past_its_timeout_is_aborted_with_the_epoch_bumped(tmp_path, fake_clock):
    async def body(h):
        _, pid, epoch = h.init()
        h.coordinator.add_partitions("app", pid, epoch, {("t", 0)})
        await fake_clock.run_for(TIMEOUT_MS / 1000)  # the check at 60 s finds it open exactly its timeout
        assert h.txn().state is ONGOING
        await fake_clock.run_for(CHECK_S)
        await settle()
        assert h.txn().state is COMPLETE_ABORT and h.txn().producer_epoch == epoch + 1
        assert h.markers.sent == [(pid, epoch + 1, False, [("t", 0)])], "the markers fence the old epoch"
        assert h.coordinator.add_partitions("app", pid, epoch, {("t", 0)}) == ErrorCode.PRODUCER_FENCED
        assert h.coordinator.end_txn("app", pid, epoch, True) == ErrorCode.PRODUCER_FENCED

    scenario(tmp_path, fake_clock, body)


def test_an_idle_producer_without_an_open_transaction_is_never_aborted(tmp_path, fake_clock):
    async def body(h):
        _, pid, epoch = h.init()
        await fake_clock.run_for(10 * TIMEOUT_MS / 1000)
        assert h.txn().state is EMPTY and h.txn().producer_epoch == epoch and h.markers.sent == []

    scenario(tmp_path, fake_clock, body)


def test_a_transaction_adding_partitions_keeps_its_start_time(tmp_path, fake_clock):
    async def body(h):
        _, pid, epoch = h.init()
        h.coordinator.add_partitions("app", pid, epoch, {("t", 0)})
        started = clock.wall_ms()
        await fake_clock.run_for(TIMEOUT_MS / 1000 - CHECK_S)
        h.coordinator.add_partitions("app", pid, epoch, {("t", 1)})  # does not extend the timeout
        assert h.txn().start_ms == started
        await fake_clock.run_for(2 * CHECK_S)
        await settle()
        assert h.txn().state is COMPLETE_ABORT

    scenario(tmp_path, fake_clock, body)


def test_an_unused_transactional_id_is_forgotten_after_its_expiration(tmp_path, fake_clock):
    async def body(h):
        h.init()
        expiration_s = h.coordinator.config["transactional.id.expiration.ms"] / 1000
        interval_s = h.coordinator.config["transaction.remove.expired.transaction.cleanup.interval.ms"] / 1000
        fake_clock.advance(expiration_s - interval_s)  # (no timers due but the periodic checks)
        await fake_clock.run_for(interval_s - 1)
        assert "app" in h.coordinator.transactions
        await fake_clock.run_for(interval_s + 1)
        assert "app" not in h.coordinator.transactions and h.log.written[-1] == ("app", None)

    scenario(tmp_path, fake_clock, body)


def test_a_new_incarnation_aborts_the_open_transaction_and_fences_the_old(tmp_path, fake_clock):
    async def body(h):
        _, pid, epoch = h.init()
        h.coordinator.add_partitions("app", pid, epoch, {("t", 0)})
        error, _, _ = h.init()
        assert error == ErrorCode.CONCURRENT_TRANSACTIONS and h.txn().state is PREPARE_ABORT
        await settle()
        error, pid2, epoch2 = h.init()
        assert error == ErrorCode.NONE and pid2 == pid and epoch2 == epoch + 2
        assert h.coordinator.add_partitions("app", pid, epoch + 1, {("t", 0)}) == ErrorCode.PRODUCER_FENCED

    scenario(tmp_path, fake_clock, body)


@pytest.mark.parametrize("timeout_ms", [0, 900_001])
def test_a_timeout_out_of_range_is_refused(tmp_path, fake_clock, timeout_ms):
    async def body(h):
        return h.init(timeout_ms=timeout_ms)[0]

    assert scenario(tmp_path, fake_clock, body) == ErrorCode.INVALID_TRANSACTION_TIMEOUT


def test_requests_of_another_producer_id_or_epoch(tmp_path, fake_clock):
    async def body(h):
        _, pid, epoch = h.init()
        assert h.coordinator.add_partitions("app", pid + 1, epoch, {("t", 0)}) == ErrorCode.INVALID_PRODUCER_ID_MAPPING
        assert h.coordinator.add_partitions("app", pid, epoch + 1, {("t", 0)}) == ErrorCode.PRODUCER_FENCED
        assert h.coordinator.add_partitions("", pid, epoch, {("t", 0)}) == ErrorCode.INVALID_REQUEST
        assert h.coordinator.add_partitions("other", pid, epoch, {("t", 0)}) == ErrorCode.INVALID_PRODUCER_ID_MAPPING

    scenario(tmp_path, fake_clock, body)


def test_verification_answers_per_partition(tmp_path, fake_clock):
    async def body(h):
        _, pid, epoch = h.init()
        h.coordinator.add_partitions("app", pid, epoch, {("t", 0)})
        return h.coordinator.verify_partitions("app", pid, epoch, [("t", 0), ("t", 1)])

    assert scenario(tmp_path, fake_clock, body) == {("t", 0): ErrorCode.NONE, ("t", 1): ErrorCode.INVALID_TXN_STATE}


def test_transaction_version_2_bumps_the_epoch_at_every_end_and_answers_a_retry(tmp_path, fake_clock):
    async def body(h):
        _, pid, epoch = h.init()
        h.coordinator.add_partitions("app", pid, epoch, {("t", 0)})
        error, pid_after, epoch_after = h.coordinator.end_txn_bumping_epoch("app", pid, epoch, True)
        assert (error, pid_after, epoch_after) == (ErrorCode.NONE, pid, epoch + 1)
        assert h.coordinator.end_txn_bumping_epoch("app", pid, epoch, True)[0] == ErrorCode.CONCURRENT_TRANSACTIONS
        await settle()
        assert h.coordinator.end_txn_bumping_epoch("app", pid, epoch, True) == (ErrorCode.NONE, pid, epoch + 1)
        assert h.markers.sent[-1][1] == epoch + 1, "the markers carry the new epoch"

    scenario(tmp_path, fake_clock, body)


def test_list_transactions_by_how_long_they_are_open(tmp_path, fake_clock):
    async def body(h):
        for tid in ("old", "new"):
            _, pid, epoch = h.init(tid)
            h.coordinator.add_partitions(tid, pid, epoch, {("t", 0)})
            fake_clock.advance(5)
        return [t.transactional_id for t in h.coordinator.list_transactions(None, set(), 6_000)]

    assert scenario(tmp_path, fake_clock, body) == ["old"]


# --- TransactionMetadata's transitions --------------------------------------------------------------

PREVIOUS = {EMPTY: {EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT}, ONGOING: {ONGOING, EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT},
            PREPARE_COMMIT: {ONGOING}, PREPARE_ABORT: {ONGOING, EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT},
            COMPLETE_COMMIT: {PREPARE_COMMIT}, COMPLETE_ABORT: {PREPARE_ABORT}}


def _prepare(txn: TransactionMetadata, target: TransactionState):
    return {EMPTY: lambda: txn.prepare_epoch_bump(1000, None, 5),
            ONGOING: lambda: txn.prepare_add_partitions({("t", 0)}, 5),
            PREPARE_COMMIT: lambda: txn.prepare_end(True, 5),
            PREPARE_ABORT: lambda: txn.prepare_end(False, 5),
            COMPLETE_COMMIT: lambda: txn.prepare_complete(5),
            COMPLETE_ABORT: lambda: txn.prepare_complete(5)}[target]()


@pytest.mark.parametrize("old", [s for s in TransactionState if s in PREVIOUS])
@pytest.mark.parametrize("new", [s for s in TransactionState if s in PREVIOUS and s not in (COMPLETE_COMMIT,
                                                                                           COMPLETE_ABORT)])
def test_only_kafkas_transaction_transitions_are_allowed(old, new):
    txn = TransactionMetadata("app", 7, 3, 1000, state=old)
    if old in PREVIOUS[new]:
        assert _prepare(txn, new).state is new
    else:
        with pytest.raises(InvalidTransition):
            _prepare(txn, new)


@pytest.mark.parametrize("prepared,completed", [(PREPARE_COMMIT, COMPLETE_COMMIT), (PREPARE_ABORT, COMPLETE_ABORT)])
def test_completion_follows_the_prepared_outcome(prepared, completed):
    txn = TransactionMetadata("app", 7, 3, 1000, state=prepared, partitions=frozenset({("t", 0)}))
    transit = txn.prepare_complete(9)
    assert transit.state is completed and transit.partitions == frozenset() and transit.last_update_ms == 9


@pytest.mark.parametrize("expected,epoch", [(None, 4), (3, 4), (2, 3)])
def test_init_producer_id_epochs_kip_360(expected, epoch):
    """A new producer bumps; one naming the current epoch bumps; a retry naming the last one gets the same."""
    txn = TransactionMetadata("app", 7, 3, 1000, state=EMPTY, last_producer_epoch=2)
    assert txn.prepare_epoch_bump(1000, expected, 5).producer_epoch == epoch


def test_init_producer_id_with_a_stale_epoch_is_fenced():
    assert TransactionMetadata("app", 7, 3, 1000, last_producer_epoch=2).prepare_epoch_bump(1000, 1, 5) is None
