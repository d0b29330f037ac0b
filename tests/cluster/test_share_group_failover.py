"""A share group (KIP-932) through the kill -9 of its share coordinator, then of its topic partition's leader,
then of its group coordinator, in a three-broker cluster.

The share-partition state is in __share_group_state, replicated like any partition: the
share coordinator's successor loads it, a new topic partition leader reads it there. Records
acknowledged before a kill are never delivered again; the others are delivered after it.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import AcknowledgeType, Producer

from broker.coordinator.internal_topics import partition_for
from helpers.cluster import CLUSTER_DEFAULTS, start_cluster  # noqa: F401 (fixture)
from helpers.share import describe, heartbeat, listed, records, share_consumer, topic_id, warm_up
from helpers.wire import WireClient

pytestmark = pytest.mark.timeout(240)

STATE_PARTITIONS = 3


def _consume(bootstrap: str, want: set[bytes], timeout: float) -> list[bytes]:
    """Values a fresh member of the group receives (accepting them) until it has ``want``, then 3 s more."""
    c = share_consumer(bootstrap, "sg", "sq", explicit=True)
    got: list[bytes] = []
    try:
        deadline = time.monotonic() + timeout
        quiet_until = None
        while time.monotonic() < (quiet_until or deadline):
            batch = records(c.poll(0.5))
            for m in batch:
                c.acknowledge(m, AcknowledgeType.ACCEPT)
            if batch:
                c.commit_sync()
            got += [m.value() for m in batch if m.value() != b"warm-up"]
            if quiet_until is None and want <= set(got):
                quiet_until = time.monotonic() + 3
    finally:
        c.close()
    return got


def test_share_group_state_survives_coordinator_and_leader_kills(start_cluster):
    cluster = start_cluster(3, min_insync_replicas=2, share_coordinator_state_topic_num_partitions=STATE_PARTITIONS,
                            group_share_heartbeat_interval_ms=500, group_share_min_heartbeat_interval_ms=100,
                            group_share_record_lock_duration_ms=5000)
    cluster.create_topic("sq", partitions=1, replication_factor=3)
    c = share_consumer(cluster.bootstrap, "sg", "sq", explicit=True)
    try:
        p = warm_up(cluster.bootstrap, "sq", [c], explicit=True)
    finally:
        c.close()
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})

    def produce(prefix: str) -> set[bytes]:
        values = {f"{prefix}-{n}".encode() for n in range(20)}
        for v in sorted(values):
            p.produce("sq", v)
        p.flush(30)
        return values

    first = produce("a")
    got = _consume(cluster.bootstrap, first, 60)
    assert sorted(got) == sorted(first)

    # the share coordinator of the key (group, topic id, 0) dies
    key = f"sg:{topic_id(cluster.brokers[1].port, 'sq')}:0"
    state_partition = partition_for(key, STATE_PARTITIONS)
    coordinator = cluster.leader("__share_group_state", state_partition)
    assert coordinator > 0
    second = produce("b")
    cluster.brokers[coordinator].kill()
    cluster.wait_for_leader("__share_group_state", state_partition, not_in=(coordinator,), timeout=60)
    got = _consume(cluster.bootstrap, second, 90)
    assert sorted(got) == sorted(second), "nothing acknowledged before the kill comes again"

    cluster.brokers[coordinator].restart()
    cluster.wait_until(lambda: cluster.full_isr("sq", 1, 3), 60, "sq fully replicated again")
    # then the topic partition's leader dies: its successor reads the state from the share coordinator
    leader = cluster.leader("sq", 0)
    third = produce("c")
    cluster.brokers[leader].kill()
    cluster.wait_for_leader("sq", 0, not_in=(leader,), timeout=60)
    got = _consume(cluster.bootstrap, third, 90)
    assert sorted(got) == sorted(third), "nothing acknowledged before the kill comes again"

    # the group's coordinator dies with a member in the group: its successor replays the group from
    # __consumer_offsets (epochs, member, assignment), lists it, and deletes it once it is empty
    cluster.brokers[leader].restart()
    offsets_partitions = CLUSTER_DEFAULTS["offsets.topic.num.partitions"]
    group_partition = partition_for("sg", offsets_partitions)
    cluster.wait_for_isr("__consumer_offsets", group_partition, set(cluster.brokers), timeout=60)
    coordinator = cluster.leader("__consumer_offsets", group_partition)
    with WireClient(cluster.brokers[coordinator].port) as w:
        joined = heartbeat(w, "sg", "raw-member", 0, ["sq"])
        assert joined["error_code"] == 0, joined
        before = describe(w, "sg")
    cluster.brokers[coordinator].kill()
    successor = cluster.wait_for_leader("__consumer_offsets", group_partition, not_in=(coordinator,), timeout=60)
    with WireClient(cluster.brokers[successor].port) as w:
        after = describe(w, "sg")
        assert (after["error_code"], after["group_epoch"], after["assignment_epoch"]) == (
            0, before["group_epoch"], before["assignment_epoch"])
        assert [(m["member_id"], m["member_epoch"]) for m in after["members"]] == [("raw-member", joined["member_epoch"])]
        assert listed(w) == [("sg", "Stable")]
        assert heartbeat(w, "sg", "raw-member", joined["member_epoch"])["error_code"] == 0  # goes on at its epoch
        assert heartbeat(w, "sg", "raw-member", -1)["error_code"] == 0
        assert listed(w) == [("sg", "Empty")]

        # the group coordinator's admin view gathers the state from the share coordinator, wherever it is
        def offsets():
            answer = w.request("DescribeShareGroupOffsets", 1, {"groups": [{"group_id": "sg", "topics": None}]})
            return [(t["topic_name"], p["partition_index"], p["start_offset"], p["lag"])
                    for t in answer["groups"][0]["topics"] for p in t["partitions"]]

        (topic, index, start, lag), = offsets()
        assert (topic, index, lag) == ("sq", 0, 0) and start > 60  # warm-ups, then 60 records, all done
        deleted = w.request("DeleteGroups", 2, {"groups_names": ["sg"]})
        assert [r["error_code"] for r in deleted["results"]] == [0]
        assert offsets() == []
        assert listed(w) == []
