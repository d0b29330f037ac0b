"""The transaction coordinator's records and state machine, without a broker.

The TransactionLog record bytes are checked field by field against Kafka's
version-0 layout, so that Kafka's tools can read a Moldau __transaction_state.
"""

from __future__ import annotations

import struct

import pytest

from broker.coordinator.internal_topics import partition_for
from broker.transaction import records
from broker.transaction.metadata import (
    InvalidTransition,
    TransactionMetadata,
    TransactionState,
)

T0 = 1_700_000_000_000


def test_transaction_log_records_have_kafkas_version_0_layout():
    txn = TransactionMetadata("app-1", producer_id=4000, producer_epoch=-1, timeout_ms=60000)
    empty = txn.prepare_epoch_bump(60000, None, T0)
    assert records.transaction_key("app-1") == struct.pack(">hh", 0, 5) + b"app-1"
    assert records.transaction_value(empty) == struct.pack(">hqhibiqq", 0, 4000, 0, 60000, 0, -1, T0, -1), (
        "Empty: no partitions (null array), no start time")
    txn.complete_transition(empty)
    ongoing = txn.prepare_add_partitions({("b", 0), ("a", 2), ("a", 1)}, T0 + 5)
    assert records.transaction_value(ongoing) == (
        struct.pack(">hqhib", 0, 4000, 0, 60000, 1)
        + struct.pack(">ih", 2, 1) + b"a" + struct.pack(">iii", 2, 1, 2)
        + struct.pack(">h", 1) + b"b" + struct.pack(">ii", 1, 0)
        + struct.pack(">qq", T0 + 5, T0 + 5)
    )
    decoded = records.decode_value(records.transaction_value(ongoing))
    assert decoded == (4000, 0, 60000, TransactionState.ONGOING, frozenset({("a", 1), ("a", 2), ("b", 0)}),
                       T0 + 5, T0 + 5, -1, -1)
    assert records.decode_key(records.transaction_key("app-1")) == "app-1"


def test_transaction_version_2_producer_ids_go_in_kafkas_tagged_fields():
    """When an EndTxn of transaction version 2 uses up the epochs, the next producer id is written with
    PrepareCommit (value version 1, flexible: tag 1, and tag 2 the client's transaction version), and
    the previous one with CompleteCommit (tag 0), so that neither is lost in a crash."""
    txn = TransactionMetadata("app-2", producer_id=4000, producer_epoch=32766, timeout_ms=60000,
                              state=TransactionState.ONGOING, partitions=frozenset({("a", 0)}), start_ms=T0)
    prepare = txn.prepare_end(True, T0 + 1, bump_epoch=True, next_producer_id=5000)
    value = records.transaction_value(prepare)
    assert value == (struct.pack(">hqhib", 1, 4000, 32767, 60000, 2)
                     + bytes([2, 2]) + b"a" + bytes([2]) + struct.pack(">i", 0) + bytes([0])
                     + struct.pack(">qq", T0 + 1, T0)
                     + bytes([2, 1, 8]) + struct.pack(">q", 5000) + bytes([2, 2]) + struct.pack(">h", 2))
    assert records.decode_value(value).to_metadata("app-2").next_producer_id == 5000
    txn.complete_transition(prepare)
    complete = txn.prepare_complete(T0 + 2)
    assert (complete.producer_id, complete.producer_epoch, complete.next_producer_id,
            complete.previous_producer_id) == (5000, 0, -1, 4000)
    assert records.decode_value(records.transaction_value(complete))[-2:] == (-1, 4000)


def test_state_names_and_the_partition_of_an_id():
    assert [s.wire_name for s in TransactionState] == [
        "Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort", "Dead",
        "PrepareEpochFence"]
    assert TransactionState.from_wire_name("PrepareAbort") is TransactionState.PREPARE_ABORT
    assert TransactionState.from_wire_name("prepareabort") is None
    # Java: "hello".hashCode() == 99162322
    assert partition_for("hello", 50) == 99162322 % 50


def test_epoch_bumps_fence_older_producers_but_answer_retries():
    txn = TransactionMetadata("app", producer_id=7, producer_epoch=-1, timeout_ms=1000)
    txn.complete_transition(txn.prepare_epoch_bump(1000, None, T0))
    assert (txn.producer_epoch, txn.last_producer_epoch) == (0, -1)
    txn.complete_transition(txn.prepare_epoch_bump(1000, 0, T0))  # KIP-360: the producer names its epoch
    assert (txn.producer_epoch, txn.last_producer_epoch) == (1, 0)
    retry = txn.prepare_epoch_bump(1000, 0, T0)
    assert retry.producer_epoch == 1, "a retry whose answer was lost gets the same epoch"
    assert txn.prepare_epoch_bump(1000, 5, T0) is None, "an epoch it never had: fenced"
    txn.complete_transition(txn.prepare_epoch_bump(1000, None, T0))
    assert (txn.producer_epoch, txn.last_producer_epoch) == (2, -1), "a new instance leaves no retry open"


def test_only_the_state_machines_transitions_are_allowed():
    txn = TransactionMetadata("app", producer_id=7, producer_epoch=0, timeout_ms=1000)
    with pytest.raises(InvalidTransition):
        txn.prepare_end(True, T0)  # nothing is open
    txn.complete_transition(txn.prepare_add_partitions({("t", 0)}, T0))
    fenced = txn.prepare_fenced_abort(T0 + 1)
    assert (fenced.state, fenced.producer_epoch, fenced.partitions) == (
        TransactionState.PREPARE_ABORT, 1, frozenset({("t", 0)}))
    txn.complete_transition(fenced)
    with pytest.raises(InvalidTransition):
        txn.prepare_add_partitions({("t", 1)}, T0 + 2)  # markers are on their way
    done = txn.prepare_complete(T0 + 3)
    assert (done.state, done.partitions, done.start_ms) == (TransactionState.COMPLETE_ABORT, frozenset(), T0)
