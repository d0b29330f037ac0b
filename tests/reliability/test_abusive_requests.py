"""Issue 20: valid-looking requests from an abusive client, with a bystander's round trips measured.

Each test sends the request pattern the issue found harmful and checks that the broker answers as
Kafka does, keeps serving the bystander (tests/helpers/bystander.py) and stays within its resources.
"""

from __future__ import annotations

import os
import time

import pytest

from helpers import wire
from helpers.bystander import Bystander, produce_body
from protocol.records import build_batch

NONE = 0
INVALID_TIMESTAMP = 32


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def create(c: wire.WireClient, name: str, partitions: int = 1, configs: dict | None = None) -> int:
    r = c.request("CreateTopics", 5, {"topics": [{"name": name, "num_partitions": partitions, "replication_factor": 1,
                                                  "assignments": [],
                                                  "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()]}],
                                      "timeout_ms": 30000, "validate_only": False})
    return r["topics"][0]["error_code"]


def produce_code(c: wire.WireClient, topic: str, records: bytes) -> int:
    return c.request("Produce", 9, produce_body(topic, records))["responses"][0]["partition_responses"][0]["error_code"]


# --- finding 3: a segment per request from old timestamps -----------------------------------------


@pytest.mark.timeout(120)
def test_old_create_times_do_not_roll_a_segment_per_request(start_broker):
    """Tiny Produce requests stamped CreateTime=1 used to roll a segment (3 fds, a snapshot) each: the roll
    compared the broker's clock with the segment's first timestamp. Kafka compares the incoming batch's."""
    b = start_broker()
    with wire.WireClient(b.port) as c, Bystander(b.port, "bystander") as bystander:
        assert create(c, "old-times") == NONE
        fds = open_fds(b.pid)
        for _ in range(500):
            assert produce_code(c, "old-times", build_batch([(None, b"x")], timestamp_ms=1)) == NONE
        segments = sorted(p.name for p in (b.data_dir / "old-times-0").glob("*.log"))
        assert len(segments) == 1, f"{len(segments)} segments for 500 requests"
        assert open_fds(b.pid) - fds < 20
    bystander.check()


@pytest.mark.timeout(60)
def test_timestamps_out_of_range_are_refused(start_broker):
    """log.message.timestamp.before.max.ms / after.max.ms (topic: message.timestamp.*.max.ms): INVALID_TIMESTAMP."""
    b = start_broker({"log.message.timestamp.before.max.ms": 86_400_000})
    now = int(time.time() * 1000)
    with wire.WireClient(b.port) as c:
        assert create(c, "stamps") == NONE
        assert produce_code(c, "stamps", build_batch([(None, b"x")], timestamp_ms=1)) == INVALID_TIMESTAMP
        assert produce_code(c, "stamps", build_batch([(None, b"x")], timestamp_ms=now - 3_600_000)) == NONE
        # Kafka's default after.max.ms: one hour
        assert produce_code(c, "stamps", build_batch([(None, b"x")], timestamp_ms=now + 7_200_000)) == INVALID_TIMESTAMP
        assert create(c, "strict", configs={"message.timestamp.before.max.ms": "1000",
                                            "message.timestamp.after.max.ms": "1000"}) == NONE
        assert produce_code(c, "strict", build_batch([(None, b"x")], timestamp_ms=now - 600_000)) == INVALID_TIMESTAMP
        assert produce_code(c, "strict", build_batch([(None, b"x")], timestamp_ms=now + 600_000)) == INVALID_TIMESTAMP
        assert produce_code(c, "strict", build_batch([(None, b"x")])) == NONE
        # LogAppendTime topics take any timestamp: the broker's replaces it
        assert create(c, "appended", configs={"message.timestamp.type": "LogAppendTime",
                                              "message.timestamp.before.max.ms": "1000"}) == NONE
        assert produce_code(c, "appended", build_batch([(None, b"x")], timestamp_ms=1)) == NONE
        r = c.request("DescribeConfigs", 4, {"resources": [{"resource_type": 2, "resource_name": "strict",
                                                           "configuration_keys": None}],
                                             "include_synonyms": False, "include_documentation": False})
        values = {e["name"]: e["value"] for e in r["results"][0]["configs"]}
        assert values["message.timestamp.before.max.ms"] == "1000"
        assert "refused batch for stamps-0: timestamp 1 is more than" in b.log_text()
