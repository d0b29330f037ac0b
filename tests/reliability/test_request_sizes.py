"""Single requests as large as a hostile client can make them within socket.request.max.bytes: each is
answered (error codes where Kafka has them), the broker's memory stays bounded and a bystander
(tests/helpers/bystander.py) is not held up.

A request of 1 MiB or more is decoded, and its answer encoded, on a worker thread, and Metadata
answers more than 10,000 topics 10,000 at a time with other connections served in between: a
Metadata request naming a million topics used to hold the event loop for 27 s or more.
"""

from __future__ import annotations

import time

import pytest
from helpers import wire
from helpers.bystander import Bystander
from helpers.reliability import peak_rss_mib, record_result

from protocol import frames
from protocol.records import build_batch

NONE = 0
UNKNOWN_TOPIC_OR_PARTITION = 3
OFFSET_METADATA_TOO_LARGE = 12


def timed(results: dict, name: str, pid: int, bystander: Bystander, c: wire.WireClient, api: str, version: int,
          body: dict) -> dict:
    """Send one request and read its answer; ``results[name]``: the seconds from sending to the answer
    (encoding and decoding here not counted), the broker's peak RSS growth and the bystander's worst
    round trip meanwhile."""
    c.correlation_id += 1
    request = frames.encode_request(api, version, c.correlation_id, "huge", body)
    started, rss = time.monotonic(), peak_rss_mib(pid)
    trips = len(bystander.round_trips)
    c.sock.sendall(request)
    answer = wire.recv_frame(c.sock)
    took = time.monotonic() - started
    time.sleep(0.2)  # the bystander's round trip under way finishes
    results[name] = {"seconds": round(took, 2), "peak_rss_growth_mib": round(peak_rss_mib(pid) - rss),
                     "bystander_worst_seconds": round(max(bystander.round_trips[trips:], default=0), 3)}
    return frames.decode_response(api, version, answer)[1]


@pytest.mark.timeout(300)
def test_requests_naming_100k_things(start_broker):
    b = start_broker()
    results: dict = {}
    batch = build_batch([(None, b"x")])
    with wire.WireClient(b.port, timeout=120) as c, Bystander(b.port, "bystander") as bystander:
        c.request("CreateTopics", 5, {"topics": [{"name": "wide", "num_partitions": 10, "replication_factor": 1,
                                                  "assignments": [], "configs": []}],
                                      "timeout_ms": 10000, "validate_only": False})
        r = timed(results, "produce_100k_partitions", b.pid, bystander, c, "Produce", 9, {
            "transactional_id": None, "acks": -1, "timeout_ms": 5000, "topic_data": [
                {"name": "wide", "partition_data": [{"index": p, "records": batch} for p in range(100_000)]}]})
        codes = [p["error_code"] for p in r["responses"][0]["partition_responses"]]
        assert codes[:10] == [NONE] * 10 and set(codes[10:]) == {UNKNOWN_TOPIC_OR_PARTITION}

        r = timed(results, "metadata_1m_topics", b.pid, bystander, c, "Metadata", 9, {
            "topics": [{"name": f"t{i}"} for i in range(1_000_000)], "allow_auto_topic_creation": False,
            "include_cluster_authorized_operations": False, "include_topic_authorized_operations": False})
        assert len(r["topics"]) == 1_000_000
        assert {t["error_code"] for t in r["topics"]} == {UNKNOWN_TOPIC_OR_PARTITION}

        r = timed(results, "describe_configs_100k_topics", b.pid, bystander, c, "DescribeConfigs", 4, {
            "resources": [{"resource_type": 2, "resource_name": f"t{i}", "configuration_keys": None}
                          for i in range(100_000)], "include_synonyms": False, "include_documentation": False})
        assert len(r["results"]) == 100_000

        r = timed(results, "list_offsets_100k_partitions", b.pid, bystander, c, "ListOffsets", 7, {
            "replica_id": -1, "isolation_level": 0, "topics": [{"name": "wide", "partitions": [
                {"partition_index": p, "current_leader_epoch": -1, "timestamp": -1} for p in range(100_000)]}]})
        codes = [p["error_code"] for p in r["topics"][0]["partitions"]]
        assert codes[:10] == [NONE] * 10 and set(codes[10:]) == {UNKNOWN_TOPIC_OR_PARTITION}
    record_result("requests_naming_100k_things", **results, bystander_worst_seconds=round(bystander.worst, 3))
    print(results, bystander.worst)
    # a million topics decoded and answered means millions of Python objects: the collector's passes over
    # them pause the loop for a second or so here (before: 27 s and more, all of it on the event loop)
    bystander.check(bound_s=3.0)


@pytest.mark.timeout(300)
def test_group_requests_with_huge_strings(start_broker):
    b = start_broker()
    results: dict = {}
    with wire.WireClient(b.port, timeout=120) as c, Bystander(b.port, "bystander") as bystander:
        r = timed(results, "join_group_50mib_metadata", b.pid, bystander, c, "JoinGroup", 5, {
            "group_id": "huge", "session_timeout_ms": 10000, "rebalance_timeout_ms": 10000, "member_id": "",
            "group_instance_id": None, "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": bytes(50 << 20)}], "reason": None})
        assert r["error_code"] == 79  # MEMBER_ID_REQUIRED: it comes back with its id
        offsets = {"group_id": "huge-offsets", "generation_id_or_member_epoch": -1, "member_id": "",
                   "group_instance_id": None, "retention_time_ms": -1}
        r = timed(results, "offset_commit_32k_metadata", b.pid, bystander, c, "OffsetCommit", 7, {**offsets,
            "topics": [{"name": "bystander", "partitions": [
                {"partition_index": 0, "committed_offset": 0, "committed_leader_epoch": -1,
                 "committed_metadata": "m" * 32000}]}]})
        assert r["topics"][0]["partitions"][0]["error_code"] == OFFSET_METADATA_TOO_LARGE
        r = timed(results, "offset_commit_20k_partitions_4kib_metadata", b.pid, bystander, c, "OffsetCommit", 7, {
            **offsets, "topics": [{"name": "bystander", "partitions": [
                {"partition_index": p, "committed_offset": 0, "committed_leader_epoch": -1,
                 "committed_metadata": "m" * 4000} for p in range(20_000)]}]})
        assert {p["error_code"] for p in r["topics"][0]["partitions"]} <= {NONE, UNKNOWN_TOPIC_OR_PARTITION}
    record_result("group_requests_with_huge_strings", **results, bystander_worst_seconds=round(bystander.worst, 3))
    print(results, bystander.worst)
    bystander.check()


@pytest.mark.timeout(60)
def test_a_large_malformed_request_closes_its_connection(broker):
    """Decoded off the event loop, a large request that does not decode still closes its connection
    with a log line, and the broker goes on serving."""
    metadata_v1 = wire.request_header_v1(3, 1, 1)
    with wire.connect(broker.port) as s:  # "2^31-1 topics", then 2 MiB of what does not hold them
        s.sendall(wire.frame(metadata_v1 + b"\x7f\xff\xff\xff" + b"\x00\x01a" * (700 << 10)))
        closed, _ = wire.wait_closed(s, timeout=30)
        assert closed
    assert "malformed request" in broker.log_text()
    with wire.connect(broker.port) as s:
        wire.api_versions_roundtrip(s, 2)
