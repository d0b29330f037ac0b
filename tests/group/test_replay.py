"""Loading __consumer_offsets: compacted semantics and transaction markers.

replay_partition gets real record batches, as the broker reads them from a
partition's segments at startup.
"""

from __future__ import annotations

import struct

from broker.group import records
from broker.group.manager import replay_partition
from broker.group.metadata import CommittedOffset, GroupMetadata, GroupState, MemberMetadata
from protocol.records import CONTROL_ABORT, CONTROL_COMMIT, build_batch, control_batch, read_header

T0 = 1_700_000_000_000


def offset_record(group, topic, partition, offset, metadata=""):
    value = records.offset_commit_value(CommittedOffset(offset, -1, metadata, T0))
    return records.offset_commit_key(group, topic, partition), value


def tombstone(group, topic, partition):
    return records.offset_commit_key(group, topic, partition), None


def log_of(*batches):
    """(header, bytes) per batch, with consecutive offsets as a log would assign them."""
    out, next_offset = [], 0
    for kind, *args in batches:
        if kind == "marker":
            raw = control_batch(*args, coordinator_epoch=0)
        else:
            recs, producer_id = args
            txn = producer_id is not None
            raw = build_batch(recs, producer_id=producer_id if txn else -1, producer_epoch=0 if txn else -1,
                              base_sequence=0 if txn else -1, transactional=txn)
        raw = struct.pack(">q", next_offset) + raw[8:]
        hdr = read_header(raw)
        out.append((hdr, raw))
        next_offset = hdr.next_offset
    return out


def committed(group):
    return {tp: c.offset for tp, c in group.offsets.items()}


def test_latest_value_wins_and_tombstones_remove():
    groups = replay_partition("p", log_of(
        ("batch", [offset_record("g", "t", 0, 1), offset_record("g", "t", 1, 1)], None),
        ("batch", [offset_record("g", "t", 0, 7, "meta")], None),
        ("batch", [tombstone("g", "t", 1)], None),
        ("batch", [offset_record("gone", "t", 0, 3)], None),
        ("batch", [tombstone("gone", "t", 0), (records.group_metadata_key("gone"), None)], None),
    ))
    assert set(groups) == {"g"}
    assert committed(groups["g"]) == {("t", 0): 7}
    assert groups["g"].offsets[("t", 0)].metadata == "meta"
    assert groups["g"].is_in(GroupState.EMPTY) and groups["g"].protocol_type is None


def test_group_metadata_restores_the_last_generation():
    subscription = struct.pack(">hih", 1, 1, 5) + b"topic" + struct.pack(">i", -1)
    stored = GroupMetadata("g", T0)
    stored.protocol_type, stored.protocol_name, stored.generation_id, stored.leader_id = "consumer", "range", 4, "m-1"
    stored.members["m-1"] = MemberMetadata("m-1", "static-1", "client", "/10.0.0.1", 9000, 7000, "consumer",
                                           [("roundrobin", b"other"), ("range", subscription)])
    emptied = GroupMetadata("h", T0)
    emptied.protocol_type, emptied.generation_id = "consumer", 2
    groups = replay_partition("p", log_of(
        ("batch", [(records.group_metadata_key("g"), records.group_metadata_value(stored, {"m-1": b"assignment"}))], None),
        ("batch", [(records.group_metadata_key("h"), records.group_metadata_value(emptied, {}))], None),
        ("batch", [(records.group_metadata_key("h"), None)], None),
        ("batch", [offset_record("h", "t", 0, 5)], None),
    ))
    g = groups["g"]
    assert (g.state, g.generation_id, g.protocol_type, g.protocol_name, g.leader_id) == (GroupState.STABLE, 4, "consumer", "range", "m-1")
    (m,) = g.members.values()
    assert (m.member_id, m.group_instance_id, m.client_host, m.rebalance_timeout_ms, m.session_timeout_ms) == (
        "m-1", "static-1", "/10.0.0.1", 9000, 7000)
    assert (m.metadata("range"), m.assignment) == (subscription, b"assignment")
    assert g.static_members == {"static-1": "m-1"} and g.subscribed_topics == {"topic"}
    # a deleted group that got new commits is an Empty group without protocol
    h = groups["h"]
    assert (h.state, h.generation_id, h.protocol_type, committed(h)) == (GroupState.EMPTY, 0, None, {("t", 0): 5})


def test_transactional_offsets_follow_their_markers():
    groups = replay_partition("p", log_of(
        ("batch", [offset_record("g", "t", 0, 1), offset_record("g", "t", 1, 1), offset_record("g", "t", 2, 1)], None),
        ("batch", [offset_record("g", "t", 0, 10)], 100),   # committed below
        ("batch", [offset_record("g", "t", 1, 20)], 200),   # aborted below
        ("batch", [offset_record("g", "t", 2, 30)], 300),   # never ends
        ("batch", [offset_record("g", "t", 3, 40)], 400),   # committed, but a plain commit came after it
        ("batch", [offset_record("g", "t", 3, 41)], None),
        ("marker", CONTROL_COMMIT, 100, 0),
        ("marker", CONTROL_ABORT, 200, 0),
        ("marker", CONTROL_COMMIT, 400, 0),
    ))
    g = groups["g"]
    assert committed(g) == {("t", 0): 10, ("t", 1): 1, ("t", 2): 1, ("t", 3): 41}
    assert [tp for tp in [("t", 0), ("t", 1), ("t", 2), ("t", 3)] if g.has_pending_offsets(tp)] == [("t", 2)]
    assert list(g.pending_txn_offsets) == [300]


def test_unreadable_batches_are_skipped():
    bad_key = struct.pack(">h", 1) + b"\xff"  # an offset commit key cut short
    unknown_value = struct.pack(">h", 99) + bytes(20)
    groups = replay_partition("p", log_of(
        ("batch", [(bad_key, b"x")], None),
        ("batch", [(records.offset_commit_key("g", "t", 0), unknown_value)], None),
        ("batch", [(struct.pack(">h", 7) + b"newer coordinator record", b"v")], None),  # not ours: ignored
        ("batch", [offset_record("g", "t", 1, 3)], None),
    ))
    assert committed(groups["g"]) == {("t", 1): 3}
