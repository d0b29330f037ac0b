"""Issue 20: valid-looking requests from an abusive client, with a bystander's round trips measured.

Each test sends the request pattern the issue found harmful and checks that the broker answers as
Kafka does, keeps serving the bystander (tests/helpers/bystander.py) and stays within its resources.
"""

from __future__ import annotations

import os
import socket
import time

import pytest

from conftest import BrokerProcess, BrokerStartError
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


# --- finding 2: file descriptors run out, and then the broker cannot start ---------------------------

OPEN_FILE_LIMIT = 1024
# the broker process, started under a hard open-file limit (it may raise its soft limit only to that)
_LAUNCH_LIMITED = ("import os, resource, sys; n = int(sys.argv[1]); resource.setrlimit(resource.RLIMIT_NOFILE, (n, n)); "
                   "os.execv(sys.executable, [sys.executable, '-m', 'broker', *sys.argv[2:]])")


class LimitedBroker(BrokerProcess):
    def __init__(self, workdir, overrides=None, open_files: int = OPEN_FILE_LIMIT):
        super().__init__(workdir, overrides)
        self.open_files = open_files

    def command(self) -> list[str]:
        python, _, _, *args = super().command()  # python -m broker serve ...
        return [python, "-c", _LAUNCH_LIMITED, str(self.open_files), *args]


@pytest.fixture
def limited_broker(tmp_path):
    started = []

    def start(open_files: int = OPEN_FILE_LIMIT, **overrides) -> LimitedBroker:
        b = LimitedBroker(tmp_path / f"limited{len(started)}", {k.replace("_", "."): v for k, v in overrides.items()},
                          open_files)
        started.append(b)
        return b

    yield start
    for b in started:
        b.cleanup()


def metadata(c: wire.WireClient, names: list[str], auto_create: bool = True) -> list[dict]:
    return c.request("Metadata", 9, {"topics": [{"name": n} for n in names], "allow_auto_topic_creation": auto_create,
                                     "include_cluster_authorized_operations": False,
                                     "include_topic_authorized_operations": False})["topics"]


@pytest.mark.timeout(300)
def test_thousands_of_partitions_under_a_small_open_file_limit(limited_broker):
    """Under a 1024 open-file limit: a 5,000-partition topic (15,000 segment files), Metadata auto-creating
    past the per-request cap, and a restart -- each partition used to pin three descriptors, so the create
    failed half-way (EMFILE) and the restart died before listening. The bystander is served throughout."""
    b = limited_broker(num_partitions=5001).start()
    assert f"open-file limit {OPEN_FILE_LIMIT}: up to 256 segment files open at once" in b.log_text()
    with wire.WireClient(b.port, timeout=120) as c, Bystander(b.port, "bystander") as bystander:
        started = time.monotonic()
        assert create(c, "wide", 5000) == NONE
        created_in = time.monotonic() - started
        for p in (0, 2500, 4999):
            r = c.request("Produce", 9, produce_body("wide", build_batch([(None, b"x")]), partition=p))
            assert r["responses"][0]["partition_responses"][0]["error_code"] == NONE
        # Metadata auto-creates at most as many partitions as CreateTopics allows in one request
        answers = metadata(c, [f"auto-{i}" for i in range(3)])
        codes = [t["error_code"] for t in answers]
        assert codes == [NONE, 3, 3], codes  # 5,001 partitions; two more would pass 10,000: UNKNOWN_TOPIC_OR_PARTITION
        assert open_fds(b.pid) < OPEN_FILE_LIMIT - 100
    bystander.check()
    print(f"5,000 partitions created in {created_in:.1f}s; bystander worst {bystander.worst:.3f}s p99 {bystander.p99:.3f}s")
    assert b.stop() == 0
    b.start(timeout=120)  # 10,000 partitions' files, opened lazily
    with wire.WireClient(b.port) as c:
        r = c.request("Produce", 9, produce_body("wide", build_batch([(None, b"after restart")]), partition=4999))
        assert r["responses"][0]["partition_responses"][0]["base_offset"] == 1
        assert [t["error_code"] for t in metadata(c, ["auto-0", "auto-1"], auto_create=False)] == [NONE, 3]
    assert "handler failed" not in b.log_text() and "Too many open files" not in b.log_text()


@pytest.mark.timeout(60)
def test_too_low_an_open_file_limit_is_explained(limited_broker):
    b = limited_broker(open_files=100)
    with pytest.raises(BrokerStartError):
        b.start()
    assert b.proc.returncode == 1
    lines = [line for line in b.log_since_start().splitlines() if line.strip()]
    assert lines[-1].startswith("moldau: the open-file limit is 100 (hard limit 100); the broker needs at least 256"), lines
    assert "Traceback" not in b.log_since_start()


# --- finding 5: single requests that stalled the loop for seconds ------------------------------------

INVALID_REQUEST = 42


@pytest.mark.timeout(180)
def test_huge_duplicate_lists_are_sets_or_invalid_requests(start_broker):
    """Metadata naming a 2,000-partition topic 500 times (5.0 s before), ListOffsets naming one partition
    100,000 times (6.2 s), DescribeConfigs naming the broker 50,000 times (6.4 s, 657 MB): Kafka answers a
    set, or INVALID_REQUEST for each duplicate, and the bystander is not held up."""
    b = start_broker()
    with wire.WireClient(b.port, timeout=60) as c, Bystander(b.port, "bystander") as bystander:
        assert create(c, "wide", 2000) == NONE
        timings = {}

        started = time.monotonic()
        topics = metadata(c, ["wide"] * 500, auto_create=False)
        timings["metadata"] = time.monotonic() - started
        assert [(t["name"], len(t["partitions"])) for t in topics] == [("wide", 2000)]

        started = time.monotonic()
        r = c.request("ListOffsets", 7, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": "wide", "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": 1}] * 100_000}]})
        timings["list_offsets"] = time.monotonic() - started
        codes = {p["error_code"] for t in r["topics"] for p in t["partitions"]}
        assert codes == {INVALID_REQUEST}

        started = time.monotonic()
        r = c.request("DescribeConfigs", 4, {"resources": [{"resource_type": 4, "resource_name": "1",
                                                           "configuration_keys": None}] * 50_000,
                                             "include_synonyms": False, "include_documentation": False})
        timings["describe_configs"] = time.monotonic() - started
        assert len(r["results"]) == 1 and r["results"][0]["error_code"] == NONE

        # unique names still answer in full
        r = c.request("ListOffsets", 7, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": "wide", "partitions": [{"partition_index": p, "current_leader_epoch": -1, "timestamp": -1}
                                            for p in range(3)]}]})
        assert [(p["error_code"], p["offset"]) for p in r["topics"][0]["partitions"]] == [(NONE, 0)] * 3
    bystander.check()
    print(f"timings {timings}; bystander worst {bystander.worst:.3f}s p99 {bystander.p99:.3f}s")


# --- finding 6: producer-state flood ---------------------------------------------------------------


def rss_mib(pid: int) -> float:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def producers_of(c: wire.WireClient, topic: str) -> list[dict]:
    r = c.request("DescribeProducers", 0, {"topics": [{"name": topic, "partition_indexes": [0]}]})
    return r["topics"][0]["partitions"][0]["active_producers"]


@pytest.mark.timeout(300)
def test_a_flood_of_producer_ids_is_bounded_per_partition(start_broker):
    """Produce requests each carrying a new producer id (the issue's 100,000 batches, now one batch per
    partition per request): a partition remembers at most 10,000 producers, the least recently used
    idle one forgotten, in memory and in the snapshot a restart reads. A well-behaved idempotent producer
    that keeps writing stays remembered."""
    from protocol.frames import encode_request

    b = start_broker()
    flood, chunk = 15_000, 500
    with wire.WireClient(b.port, timeout=60) as c, Bystander(b.port, "bystander") as bystander:
        assert create(c, "pids") == NONE
        before = rss_mib(b.pid)
        for start in range(0, flood, chunk):
            frames = b"".join(
                encode_request("Produce", 9, pid, "flood", produce_body(
                    "pids", build_batch([(None, b"x")], producer_id=pid, producer_epoch=0, base_sequence=0)))
                for pid in range(start, start + chunk))
            c.sock.sendall(frames)
            for _ in range(chunk):
                wire.recv_frame(c.sock)
            if start % 5000 == 0:  # the well-behaved producer writes now and then
                assert produce_code(c, "pids", build_batch([(None, b"good")], producer_id=1_000_000, producer_epoch=0,
                                                            base_sequence=start // 5000)) == NONE
        grown = rss_mib(b.pid) - before
        pids = {p["producer_id"] for p in producers_of(c, "pids")}
        assert len(pids) == 10_000, len(pids)
        assert 1_000_000 in pids and flood - 1 in pids and 0 not in pids
    bystander.check()
    assert grown < 100, f"the broker grew by {grown:.0f} MiB"
    print(f"{flood} producer ids: RSS +{grown:.1f} MiB; bystander worst {bystander.worst:.3f}s")
    assert b.stop() == 0
    b.start()
    with wire.WireClient(b.port) as c:
        assert len(producers_of(c, "pids")) == 10_000


@pytest.mark.timeout(180)
def test_connections_beyond_the_descriptor_budget_wait_not_starving_files(limited_broker):
    """Under a 1024 open-file limit, 1,100 connections: those past what the limit leaves for connections
    wait in the listen backlog, not accepted (max.connections is capped by it), so creating a topic and
    producing still get their files, and accept() never fails with EMFILE."""
    b = limited_broker().start()
    held = []
    try:
        with Bystander(b.port, "bystander") as bystander, wire.WireClient(b.port) as c:
            for _ in range(1100):
                s = socket.create_connection(("127.0.0.1", b.port), timeout=10, source_address=("127.0.0.2", 0))
                held.append(s)
            time.sleep(1)
            assert create(c, "after-the-flood", 50) == NONE  # on a connection made before the flood
            assert produce_code(c, "after-the-flood", build_batch([(None, b"x")])) == NONE
            assert open_fds(b.pid) < OPEN_FILE_LIMIT
        bystander.check()
    finally:
        for s in held:
            s.close()
    assert "Too many open files" not in b.log_text()
    assert "connections open, the limit is 703" in b.log_text() or "the limit is 704" in b.log_text()


@pytest.mark.timeout(300)
def test_growing_and_deleting_thousands_of_partitions_does_not_stall_others(start_broker):
    """CreatePartitions adding 3,000 partitions and DeleteTopics of a 6,000-partition topic work in steps
    (each used to hold the event loop for seconds)."""
    b = start_broker()
    with wire.WireClient(b.port, timeout=120) as c, Bystander(b.port, "bystander") as bystander:
        assert create(c, "grown", 3000) == NONE
        r = c.request("CreatePartitions", 3, {"topics": [{"name": "grown", "count": 6000, "assignments": None}],
                                               "timeout_ms": 60000, "validate_only": False})
        assert r["results"][0]["error_code"] == NONE
        assert len(metadata(c, ["grown"], auto_create=False)[0]["partitions"]) == 6000
        r = c.request("DeleteTopics", 6, {"topics": [{"name": "grown", "topic_id": __import__("uuid").UUID(int=0)}],
                                           "timeout_ms": 60000})
        assert r["responses"][0]["error_code"] == NONE
        assert not list(b.data_dir.glob("grown-*"))
    bystander.check()
    print(f"bystander worst {bystander.worst:.3f}s p99 {bystander.p99:.3f}s")


@pytest.mark.timeout(300)
def test_produce_auto_creates_a_few_topics_a_request(start_broker):
    """A Produce naming 2,000 unknown topics: it auto-creates a few (on the event loop), answers the rest
    UNKNOWN_TOPIC_OR_PARTITION, which clients retry; the bystander is not held up."""
    b = start_broker()
    batch = build_batch([(None, b"x")])
    with wire.WireClient(b.port, timeout=120) as c, Bystander(b.port, "bystander") as bystander:
        r = c.request("Produce", 9, {"transactional_id": None, "acks": -1, "timeout_ms": 5000, "topic_data": [
            {"name": f"made-by-produce-{i}", "partition_data": [{"index": 0, "records": batch}]} for i in range(2000)]})
        codes = [t["partition_responses"][0]["error_code"] for t in r["responses"]]
        assert codes == [NONE] * 16 + [3] * 1984
        time.sleep(0.5)
    bystander.check()
