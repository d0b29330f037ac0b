"""The stage timestamps (broker/cluster/stages.py) name a fetch's records by the offset after their last whole
batch, read from the headers alone."""

from __future__ import annotations

from broker.cluster.stages import records_end
from protocol.records import build_batch


def test_the_end_of_fetched_records_is_the_offset_after_their_last_whole_batch():
    first = build_batch([(None, b"a"), (None, b"b")], base_offset=10)
    second = build_batch([(None, b"c")] * 3, base_offset=12)
    assert records_end(first) == 12
    assert records_end(first + second) == 15
    assert records_end(memoryview(first + second)) == 15, "a view of the log's bytes, as a read returns"


def test_a_partial_batch_at_the_end_is_not_counted_and_no_whole_batch_is_minus_one():
    first = build_batch([(None, b"a")], base_offset=7)
    second = build_batch([(None, b"b" * 100)], base_offset=8)
    assert records_end(first + second[:40]) == 8
    assert records_end(second[:40]) == -1
    assert records_end(b"") == -1
