"""Requests and connections meant to exhaust the broker: it answers with error codes, keeps its
memory bounded and goes on serving a well-behaved client.

Memory is the broker's VmHWM (peak resident set) from /proc; the broker
raises its own open-file limit to the hard limit at startup, and this test
raises its own soft limit to hold a thousand sockets.
"""

from __future__ import annotations

import resource
import socket
import struct
import threading
import time
import uuid

import pytest

from helpers import wire
from helpers.kafka import create_topic, flush, produce_one, producer, read_from
from helpers.reliability import budget, peak_rss_mib, record_result
from protocol import frames
from protocol.records import build_batch

TOPIC = "limits"
POLICY_VIOLATION = 44
RECORD_LIST_TOO_LARGE = 18
NONE = 0

IDLE_CONNECTIONS = 1000
SLOW_CONNECTIONS = 50  # each sends a request one byte a second
HALF_SENT_FRAMES = 20  # each announces a 100 MiB frame and sends 256 KiB of it
UNREAD_CONNECTIONS = 20  # each pipelines Fetch requests for 1 MiB and never reads an answer
FETCHES_EACH = 200
HOLD_SECONDS = budget(8, 60, "MOLDAU_CHAOS_HOLD_SECONDS")
MEMORY_BOUND_MIB = 250  # peak growth allowed over the idle broker


def create_topics_request(c: wire.WireClient, partitions: list[int], configs=()) -> list[int]:
    topics = [{"name": f"{TOPIC}-{i}", "num_partitions": n, "replication_factor": 1, "assignments": [],
               "configs": [{"name": k, "value": v} for k, v in configs]} for i, n in enumerate(partitions)]
    r = c.request("CreateTopics", 5, {"topics": topics, "timeout_ms": 10000, "validate_only": False})
    return [t["error_code"] for t in r["topics"]]


def produce_request(c: wire.WireClient, topic: str, records: bytes) -> int:
    r = c.request("Produce", 9, {"transactional_id": None, "acks": -1, "timeout_ms": 5000, "topic_data": [
        {"name": topic, "partition_data": [{"index": 0, "records": records}]}]})
    return r["responses"][0]["partition_responses"][0]["error_code"]


@pytest.mark.timeout(60)
def test_huge_partition_counts_and_oversized_batches_get_error_codes(broker):
    with wire.WireClient(broker.port) as c:
        started = time.monotonic()
        assert create_topics_request(c, [0x7FFFFFFF]) == [POLICY_VIOLATION]
        assert create_topics_request(c, [6000, 6000]) == [POLICY_VIOLATION] * 2, "the limit is per request"
        assert time.monotonic() - started < 2, "refusing must not create anything first"
        assert not list(broker.data_dir.glob(f"{TOPIC}-*")), "no partition directory may be left behind"

        assert create_topics_request(c, [1], [("segment.bytes", str(16 * 1024))]) == [NONE]
        r = c.request("CreatePartitions", 1, {"topics": [{"name": f"{TOPIC}-0", "count": 0x7FFFFFFF,
                                                         "assignments": None}],
                                              "timeout_ms": 10000, "validate_only": False})
        assert r["results"][0]["error_code"] == POLICY_VIOLATION
        # a batch larger than the topic's segments is refused, and the connection stays usable
        assert produce_request(c, f"{TOPIC}-0", build_batch([(None, bytes(20 * 1024))])) == RECORD_LIST_TOO_LARGE
        assert produce_request(c, f"{TOPIC}-0", build_batch([(None, b"fits")])) == NONE
    assert "handler failed" not in broker.log_text()


def fetch_request(correlation_id: int) -> bytes:
    """A Fetch (v11) for up to 1 MiB of partition 0 from offset 0, answered at once."""
    return frames.encode_request("Fetch", 11, correlation_id, "never-reads", {
        "replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": 0,
        "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
        "topics": [{"topic": TOPIC, "topic_id": uuid.UUID(int=0), "partitions": [
            {"partition": 0, "current_leader_epoch": -1, "fetch_offset": 0, "log_start_offset": -1,
             "partition_max_bytes": 1 << 20}]}]})


def open_file_limit(pid: int) -> int:
    for line in open(f"/proc/{pid}/limits"):
        if line.startswith("Max open files"):
            return int(line.split()[3])
    raise AssertionError("no open-file limit in /proc/<pid>/limits")


def raise_own_file_limit(needed: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < needed:
        pytest.skip(f"the hard open-file limit {hard} is below the {needed} this test holds")
    if soft != resource.RLIM_INFINITY and soft < needed:
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))


def send_slowly(sockets: list[socket.socket], data: bytes, stop: threading.Event) -> None:
    """One byte a second to every socket, until ``stop``."""
    for byte in data:
        if stop.wait(1.0):
            return
        for s in sockets:
            wire.send_ignoring_reset(s, bytes([byte]))


@pytest.mark.timeout(budget(120, 300))
def test_hostile_connections_keep_memory_bounded(start_broker):
    total = IDLE_CONNECTIONS + SLOW_CONNECTIONS + HALF_SENT_FRAMES + UNREAD_CONNECTIONS
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))  # a login shell's kind of limit
    try:
        b = start_broker()
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    limit = open_file_limit(b.pid)
    raised = 1 << 20 if hard == resource.RLIM_INFINITY else hard
    assert limit == raised, f"the broker's open-file limit is {limit}, not the hard limit {raised}"
    raise_own_file_limit(total + 1000)
    create_topic(b.bootstrap, TOPIC, partitions=1)
    p, _ = producer(b.bootstrap)
    for _ in range(3000):  # 3 MiB, so every Fetch is answered with 1 MiB
        p.produce(TOPIC, value=bytes(1024), partition=0)
        p.poll(0)
    flush(p)
    baseline = peak_rss_mib(b.pid)

    held: list[socket.socket] = []
    stop = threading.Event()
    try:
        held += [wire.connect(b.port) for _ in range(IDLE_CONNECTIONS)]
        slow = [wire.connect(b.port) for _ in range(SLOW_CONNECTIONS)]
        held += slow
        threading.Thread(target=send_slowly, args=(slow, wire.api_versions_v0(5), stop), daemon=True).start()
        for _ in range(HALF_SENT_FRAMES):
            s = wire.connect(b.port)
            s.sendall(struct.pack(">i", 100 * 1024 * 1024 - 1) + bytes(256 * 1024))
            held.append(s)
        pipelined = b"".join(fetch_request(i) for i in range(FETCHES_EACH))
        for _ in range(UNREAD_CONNECTIONS):
            s = wire.connect(b.port)
            s.setblocking(False)
            try:
                s.send(pipelined)  # whatever the socket takes; the broker stops reading when its queue is full
            except BlockingIOError:
                pass
            held.append(s)

        # a well-behaved client is served all the while
        worst = 0.0
        deadline = time.monotonic() + HOLD_SECONDS
        with wire.connect(b.port) as good:
            while time.monotonic() < deadline:
                started = time.monotonic()
                wire.api_versions_roundtrip(good, 1)
                worst = max(worst, time.monotonic() - started)
                time.sleep(0.1)
        peak = peak_rss_mib(b.pid)
        offset = produce_one(p, TOPIC, 0, b"k", b"while besieged")
        assert read_from(b.bootstrap, TOPIC, 0, offset, offset + 1)[0][2] == b"while besieged"
    finally:
        stop.set()
        for s in held:
            s.close()
    assert b.alive(), b.log_tail()
    assert worst < 2.0 and peak - baseline < MEMORY_BOUND_MIB, (
        f"a bystander's ApiVersions took up to {worst:.2f}s; peak RSS grew from {baseline:.0f} to {peak:.0f} MiB")
    # and it lets go of them all
    with wire.connect(b.port) as s:
        wire.api_versions_roundtrip(s, 2)
    record_result("hostile_connections", connections=total, idle=IDLE_CONNECTIONS, slow=SLOW_CONNECTIONS,
                  half_sent_100mib_frames=HALF_SENT_FRAMES,
                  unread_fetch_connections=f"{UNREAD_CONNECTIONS} x {FETCHES_EACH} x 1 MiB",
                  broker_open_file_limit=limit, baseline_rss_mib=round(baseline, 1), peak_rss_mib=round(peak, 1),
                  bystander_worst_seconds=round(worst, 3), held_seconds=HOLD_SECONDS)
