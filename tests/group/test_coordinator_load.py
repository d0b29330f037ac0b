"""Listen first, load later (issue 25): a broker with a large __consumer_offsets opens its listener
before it replays the partition, answers other requests meanwhile, and its group's keys
COORDINATOR_LOAD_IN_PROGRESS until the replay is done; then the committed offsets are all there.
"""

from __future__ import annotations

import re

from broker.errors import ErrorCode
from helpers.kafka import create_topic
from helpers.wire import WireClient

GROUP, TOPIC, PARTITIONS = "heavy-group", "committed", 100
ROUNDS = 2_000  # of one commit per partition: 200,000 commits in the group's offsets partition


def commit(client: WireClient, round_: int) -> None:
    response = client.request("OffsetCommit", 7, {
        "group_id": GROUP, "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
        "topics": [{"name": TOPIC, "partitions": [
            {"partition_index": p, "committed_offset": round_ * PARTITIONS + p, "committed_leader_epoch": -1,
             "committed_metadata": ""} for p in range(PARTITIONS)]}]})
    assert {p["error_code"] for t in response["topics"] for p in t["partitions"]} == {0}


def offset_fetch(client: WireClient) -> dict:
    return client.request("OffsetFetch", 7, {"group_id": GROUP, "require_stable": False, "topics": [
        {"name": TOPIC, "partition_indexes": list(range(PARTITIONS))}]})


def test_a_broker_listens_while_it_loads_200k_commits(start_broker):
    b = start_broker()
    create_topic(b.bootstrap, TOPIC, PARTITIONS)
    with WireClient(b.port, timeout=60) as client:
        for round_ in range(ROUNDS):
            commit(client, round_)
    b.restart(timeout=60)  # returns once the listener's line is logged

    loading = 0
    with WireClient(b.port, timeout=60) as client:
        assert client.request("ApiVersions", 3, {"client_software_name": "t", "client_software_version": "1"}
                              )["error_code"] == 0
        metadata = client.request("Metadata", 9, {"topics": [{"name": TOPIC}], "allow_auto_topic_creation": False,
                                                  "include_cluster_authorized_operations": False,
                                                  "include_topic_authorized_operations": False})
        assert metadata["topics"][0]["error_code"] == 0 and len(metadata["topics"][0]["partitions"]) == PARTITIONS
        found = client.request("FindCoordinator", 3, {"key": GROUP, "key_type": 0})
        assert (found["error_code"], found["port"]) == (0, b.port)
        while (answer := offset_fetch(client))["error_code"] == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
            loading += 1
        assert answer["error_code"] == 0, answer
    last = (ROUNDS - 1) * PARTITIONS
    assert {p["partition_index"]: p["committed_offset"] for p in answer["topics"][0]["partitions"]} == {
        p: last + p for p in range(PARTITIONS)}
    assert loading > 0, "the group was served before any request could see it loading"
    run = b.log_since_start()
    listening = run.index("listening on")
    replayed = re.search(rf"loaded 1 groups from __consumer_offsets-\d+ \({ROUNDS * PARTITIONS} records\)", run)
    assert replayed is not None and replayed.start() > listening, "the offsets were replayed before the listener opened"
