"""Issue 20, findings 1 and 4: Fetch requests that used to cost the broker far more than they should.

A Fetch names its partitions as a map (a partition named 20,000 times is read
once), a parked Fetch is dropped when its connection closes and is re-checked
by comparing offsets when its partitions get appends, and a response holds at
most the broker's ``fetch.max.bytes``. Each test sends the issue's request
pattern while a bystander (tests/helpers/bystander.py) produces to the same
partition every 50 ms, and measures the broker's CPU per bystander round trip.
"""

from __future__ import annotations

import os
import socket
import struct
import time

import pytest

from helpers import fetch_requests, wire
from helpers.bystander import Bystander, produce_body
from helpers.reliability import peak_rss_mib, record_result
from protocol import frames
from protocol.records import build_batch

TOPIC = "fetch-abuse"
CPU_PER_APPEND_S = 0.02  # broker CPU per bystander round trip allowed while attacked (one is ~1 ms)


def fetch_request(correlation_id: int, partitions: list[int], **limits) -> bytes:
    return fetch_requests.fetch_request(correlation_id, TOPIC, partitions, **limits)


def cpu_seconds(pid: int) -> float:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_per_round_trip(pid: int, bystander: Bystander, trips: int = 40) -> float:
    """The broker's CPU seconds per bystander round trip (one append to the attacked partition each)."""
    start_cpu, start_trips = cpu_seconds(pid), len(bystander.round_trips)
    deadline = time.monotonic() + 30
    while len(bystander.round_trips) - start_trips < trips and time.monotonic() < deadline and not bystander.failures:
        time.sleep(0.05)
    done = len(bystander.round_trips) - start_trips
    assert done, f"the bystander made no round trip: {bystander.failures[:3]}"
    return (cpu_seconds(pid) - start_cpu) / done


def fill(port: int, topic: str, partitions: int, batches: int, value_size: int) -> None:
    with wire.WireClient(port) as c:
        c.request("CreateTopics", 5, {"topics": [{"name": topic, "num_partitions": partitions, "replication_factor": 1,
                                                  "assignments": [], "configs": []}],
                                      "timeout_ms": 30000, "validate_only": False})
        for p in range(partitions):
            for _ in range(batches):
                r = c.request("Produce", 9, produce_body(topic, build_batch([(None, bytes(value_size))]), partition=p))
                assert r["responses"][0]["partition_responses"][0]["error_code"] == 0


@pytest.mark.timeout(180)
def test_parked_fetches_naming_a_partition_20000_times_cost_nothing_per_append(start_broker):
    """Five connections park a Fetch naming one partition 20,000 times (max_wait_ms and min_bytes 2^31-1)
    while the bystander appends to that partition; then 1,000 more park one and hang up at once."""
    b = start_broker()
    request = fetch_request(1, [0] * 20_000)
    with Bystander(b.port, TOPIC) as bystander:
        attackers = [wire.connect(b.port) for _ in range(5)]
        for s in attackers:
            s.sendall(request)
        time.sleep(1)  # parked by now
        attacked = cpu_per_round_trip(b.pid, bystander)
        assert attacked < CPU_PER_APPEND_S, f"{attacked * 1000:.1f} ms of broker CPU per append while fetches are parked"
        for s in attackers:
            s.close()
        for i in range(1000):
            with wire.connect(b.port) as s:
                s.sendall(fetch_request(i, [0]))
        time.sleep(1)
        after_hang_ups = cpu_per_round_trip(b.pid, bystander)
    bystander.check()
    assert after_hang_ups < CPU_PER_APPEND_S, (
        f"{after_hang_ups * 1000:.1f} ms of broker CPU per append after the fetches' connections closed")
    assert b.alive()
    record_result("fetch_abuse_parked", broker_cpu_ms_per_append_parked=round(attacked * 1000, 2),
                  broker_cpu_ms_per_append_after_hang_ups=round(after_hang_ups * 1000, 2),
                  bystander_p99_seconds=round(bystander.p99, 3), bystander_worst_seconds=round(bystander.worst, 3))


@pytest.mark.timeout(180)
def test_a_partition_named_many_times_is_returned_once(start_broker):
    """One Fetch naming a 2 MiB partition 50 times (max_bytes 2^31-1) used to return it 50 times."""
    b = start_broker()
    fill(b.port, TOPIC, 1, 32, 64 * 1024)
    with wire.WireClient(b.port) as c:
        c.sock.sendall(fetch_request(1, [0] * 50, max_wait_ms=0, min_bytes=0))
        (size,) = struct.unpack(">i", wire.recv_exact(c.sock, 4))
        assert size < 3 << 20, f"a {size}-byte response to a Fetch of one 2 MiB partition"
        _, r = frames.decode_response("Fetch", 11, wire.recv_exact(c.sock, size))
    (topic,) = r["responses"]
    assert [p["partition_index"] for p in topic["partitions"]] == [0]
    assert len(topic["partitions"][0]["records"]) > 2_000_000


@pytest.mark.timeout(180)
def test_broker_fetch_max_bytes_caps_responses_to_clients_that_never_read(start_broker):
    """Four connections that never read each ask for 8 partitions x 2 MiB with max_bytes 2^31-1, many
    times: with fetch.max.bytes 4 MiB each response holds 4 MiB, and the broker's memory stays bounded."""
    b = start_broker({"fetch.max.bytes": 4 << 20})
    fill(b.port, TOPIC, 8, 32, 64 * 1024)
    with wire.WireClient(b.port) as c:
        c.sock.sendall(fetch_request(1, list(range(8)), max_wait_ms=0, min_bytes=0))
        (size,) = struct.unpack(">i", wire.recv_exact(c.sock, 4))
        assert size <= (4 << 20) + 4096, f"a {size}-byte response with fetch.max.bytes 4 MiB"
    baseline = peak_rss_mib(b.pid)
    pipelined = b"".join(fetch_request(i, list(range(8)) * 25, max_wait_ms=0, min_bytes=0) for i in range(20))
    held = []
    with Bystander(b.port, "bystander") as bystander:
        for _ in range(4):
            s = wire.connect(b.port)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.setblocking(False)
            try:
                s.send(pipelined)
            except BlockingIOError:
                pass
            held.append(s)
        time.sleep(5)
    peak = peak_rss_mib(b.pid)
    for s in held:
        s.close()
    bystander.check()
    assert peak - baseline < 100, f"peak RSS grew from {baseline:.0f} to {peak:.0f} MiB"
    assert b.alive()
    record_result("fetch_abuse_unread", baseline_rss_mib=round(baseline, 1), peak_rss_mib=round(peak, 1),
                  bystander_p99_seconds=round(bystander.p99, 3), bystander_worst_seconds=round(bystander.worst, 3))
