"""Share group records of __consumer_offsets (broker/share/records.py) replayed as a new coordinator does."""

from __future__ import annotations

import uuid

from broker.group.manager import replay_partition
from broker.share import records as sr
from broker.share.group import ShareGroup, ShareMember, StatePartitions
from group.test_replay import log_of

T = uuid.UUID(int=7)


def test_a_share_group_replays_to_its_epochs_members_targets_and_state_partitions():
    one = ShareMember("m1", member_epoch=3, previous_member_epoch=2, rack_id="r", client_id="c", client_host="/h",
                      subscribed=("t",), assignment=frozenset({(T, 0), (T, 1)}))
    two = ShareMember("m2", member_epoch=3, subscribed=("t",), assignment=frozenset({(T, 1)}))
    group = ShareGroup("sg", initialized={T: StatePartitions("t", frozenset({0, 1}), 1000)}, deleting={T: "t"})
    written = [sr.member_metadata("sg", one), sr.member_metadata("sg", two), sr.group_epoch("sg", 3),
               sr.target_assignment("sg", "m1", one.assignment), sr.target_assignment("sg", "m2", two.assignment),
               sr.assignment_epoch("sg", 3), sr.current_assignment("sg", one), sr.current_assignment("sg", two),
               sr.state_partitions(group)]
    loaded = replay_partition("p", log_of(("batch", written, None)))["sg"].share
    assert (loaded.group_epoch, loaded.assignment_epoch) == (3, 3)
    assert loaded.members["m1"] == one and loaded.members["m2"].assignment == two.assignment
    assert loaded.initialized == group.initialized and loaded.deleting == {T: "t"} and loaded.initializing == {}

    # m2 left (epoch 4), then the empty group was deleted: nothing of it is loaded
    left = [*sr.member_tombstones("sg", "m2"), sr.group_epoch("sg", 4)]
    after = replay_partition("p", log_of(("batch", written, None), ("batch", left, None)))["sg"].share
    assert list(after.members) == ["m1"] and after.group_epoch == 4
    gone = [*sr.member_tombstones("sg", "m1"), *sr.group_tombstones("sg")]
    assert "sg" not in replay_partition("p", log_of(("batch", written, None), ("batch", left, None),
                                                    ("batch", gone, None)))
