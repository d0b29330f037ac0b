"""The share-partition state machine (broker/share/partition.py), the simple assignor and the share
snapshot records in process."""

from __future__ import annotations

import uuid

import pytest

from broker.share import assignor
from broker.share.partition import InvalidRecordState, RecordState, SharePartition
from broker.share.persister import ShareKey, Snapshot, decode, encode_key, encode_value
from protocol.records import BatchHeader

ACCEPT, RELEASE, REJECT = 1, 2, 3


def batch(base: int, count: int, producer_id: int = -1, attributes: int = 0) -> BatchHeader:
    return BatchHeader(base, 0, 0, 2, 0, attributes, count - 1, 0, 0, producer_id, 0, 0, count)


TXN, CONTROL = 0x10, 0x20


def indexed(sp: SharePartition) -> bool:
    """The state indexes agree with the records."""
    return (sp.available == {o for o, r in sp.records.items() if r.state == RecordState.AVAILABLE}
            and set(sp.acquired) == {o for o, r in sp.records.items() if r.state == RecordState.ACQUIRED})


def test_acquire_acknowledge_and_the_start_moves_past_what_is_done():
    sp = SharePartition(0, 100, 3)
    assert sp.acquire([batch(0, 5)], 10, "m1", 1000, 500) == [(0, 4, 1)]
    assert sp.acquire([batch(0, 5)], 10, "m2", 1000, 500) == []  # all held by m1
    sp.acknowledge("m1", 0, 1, [ACCEPT])
    assert sp.start == 2
    sp.acknowledge("m1", 2, 4, [RELEASE, REJECT, ACCEPT])
    assert sp.start == 2 and sp.records[2].state == RecordState.AVAILABLE
    assert sp.first_to_read(10) == 2
    assert sp.acquire([batch(0, 5)], 10, "m2", 1000, 500) == [(2, 2, 2)]
    sp.acknowledge("m2", 2, 2, [ACCEPT])
    assert sp.start == 5 and not sp.records and indexed(sp)


def test_an_acknowledgement_of_what_the_member_does_not_hold_changes_nothing():
    sp = SharePartition(0, 100, 3)
    sp.acquire([batch(0, 3)], 10, "m1", 1000, 500)
    with pytest.raises(InvalidRecordState):
        sp.acknowledge("m2", 0, 0, [ACCEPT])
    with pytest.raises(InvalidRecordState):
        sp.acknowledge("m1", 1, 3, [ACCEPT])  # offset 3 was never acquired
    with pytest.raises(InvalidRecordState):
        sp.acknowledge("m1", 0, 2, [ACCEPT, ACCEPT])  # one type per offset or one for all
    with pytest.raises(InvalidRecordState):
        sp.acknowledge("m1", 0, 2**62, [ACCEPT])  # refused at once, not walked
    assert all(r.state == RecordState.ACQUIRED for r in sp.records.values())


def test_expired_locks_release_and_the_delivery_limit_archives():
    sp = SharePartition(0, 100, 2)
    sp.acquire([batch(0, 2)], 10, "m1", 1000, 500)
    assert sp.release_expired(999) == 0
    assert sp.release_expired(1000) == 2
    assert sp.acquire([batch(0, 2)], 10, "m2", 3000, 500) == [(0, 1, 2)]
    assert indexed(sp) and sp.earliest_deadline == 3000 and sp.in_flight() == 2
    sp.release_member("m2")  # second delivery was the last
    assert sp.start == 2 and not sp.records


def test_max_records_stops_at_a_batch_boundary_and_the_window_is_bounded():
    sp = SharePartition(0, 4, 5)
    assert sp.acquire([batch(0, 3), batch(3, 3)], 10, "m", 1, 2) == [(0, 2, 1)]  # whole first batch
    assert sp.acquire([batch(3, 3)], 10, "m", 1, 10) == [(3, 3, 1)]  # window of 4 offsets full
    assert sp.first_to_read(10) is None


def test_read_committed_archives_aborted_transactions_and_markers():
    sp = SharePartition(0, 100, 5)
    batches = [batch(0, 1, 7, TXN), batch(1, 1, 7, TXN | CONTROL),  # committed, then its marker
               batch(2, 2, 7, TXN), batch(4, 1, 7, TXN | CONTROL),  # aborted, then its marker
               batch(5, 1)]
    assert sp.acquire(batches, 6, "m", 1, 500, aborted=[(7, 2)]) == [(0, 0, 1), (5, 5, 1)]
    assert [sp.records[o].state for o in (1, 2, 3, 4)] == [RecordState.ARCHIVED] * 4
    assert indexed(sp)


def test_state_batches_round_trip_through_a_snapshot_record():
    sp = SharePartition(10, 100, 5)
    sp.acquire([batch(10, 6)], 20, "m", 1, 500)
    sp.acknowledge("m", 10, 15, [RELEASE, ACCEPT, ACCEPT, REJECT, RELEASE, RELEASE])
    key = ShareKey("g", uuid.uuid4(), 3)
    decoded_key, snapshot = decode(encode_key(key), encode_value(Snapshot(sp.start, sp.state_batches(), 0, 4), 1))
    assert decoded_key == key and snapshot.leader_epoch == 4
    again = SharePartition(0, 100, 5)
    again.restore(snapshot.start_offset, snapshot.state_batches)
    assert again.start == 10 and again.next_offset == 16 and indexed(again)
    assert {o: (r.state, r.delivery_count) for o, r in again.records.items()} == {
        o: (r.state, r.delivery_count) for o, r in sp.records.items()}
    assert decode(encode_key(key), None) == (key, None)


def test_the_simple_assignor_shares_partitions_when_members_outnumber_them():
    a, b = uuid.UUID(int=1), uuid.UUID(int=2)
    three = assignor.assign({"m1": ("x",), "m2": ("x",), "m3": ("x", "y")}, {"x": (a, 1), "y": (b, 4)})
    assert three == {"m1": {(a, 0)}, "m2": {(a, 0)}, "m3": {(a, 0), (b, 0), (b, 1), (b, 2), (b, 3)}}
    two = assignor.assign({"m1": ("x",), "m2": ("x",)}, {"x": (a, 3)})
    assert two == {"m1": {(a, 0), (a, 2)}, "m2": {(a, 1)}}
