"""A connection's pipelined acks=all produces: appended as they come, each waiting for its own replication
only, answered in order (issue 26).

A connection handles one request at a time, as in Kafka -- but a Produce that has appended and waits for
the in-sync replicas lets the requests behind it be handled meanwhile. Otherwise each would also wait out
the replication of every request in front of it, and a producer's pipeline (librdkafka's default is a
million requests in flight) would queue for seconds behind a few milliseconds of replication each.
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from broker.errors import ErrorCode
from helpers import fetch_requests, wire
from helpers.bystander import produce_body
from helpers.cluster import start_cluster  # noqa: F401 (fixture)
from protocol import frames
from protocol.records import build_batch

pytestmark = pytest.mark.timeout(180)

PIPELINE = 5


def send_pipeline(sock, topic: str, first_id: int, count: int) -> None:
    sock.sendall(b"".join(frames.encode_request("Produce", 9, first_id + i, "pipeline",
                                                produce_body(topic, build_batch([(None, b"%d" % (first_id + i))])))
                          for i in range(count)))


def answers(sock, count: int) -> list[tuple[int, dict]]:
    """(correlation id, the partition's answer) of the next ``count`` Produce responses."""
    found = []
    for _ in range(count):
        correlation_id, body = frames.decode_response("Produce", 9, memoryview(wire.recv_frame(sock)))
        found.append((correlation_id, body["responses"][0]["partition_responses"][0]))
    return found


def test_pipelined_acks_all_produces_wait_for_their_own_replication_only(start_cluster, monkeypatch):
    """Each acks=all wait starts a second late (a fault hook standing in for slow replication): five
    pipelined requests take about one second, not five, and are answered in order."""
    monkeypatch.setenv("MOLDAU_FAULT_DELAY_REPLICATION_WAIT_MS", "1000")
    cluster = start_cluster(3, min_insync_replicas=2)
    cluster.create_topic("pipelined", partitions=1, replication_factor=3)
    sock = wire.connect(cluster.brokers[cluster.leader("pipelined")].port, 30)
    started = time.monotonic()
    send_pipeline(sock, "pipelined", 1, PIPELINE)
    # a request of another kind behind them is handled meanwhile and answered after them
    sock.sendall(frames.encode_request("ApiVersions", 3, 99, "pipeline",
                                       {"client_software_name": "t", "client_software_version": "1"}))
    got = answers(sock, PIPELINE)
    took = time.monotonic() - started
    correlation_id, _ = frames.decode_response("ApiVersions", 3, memoryview(wire.recv_frame(sock)))
    assert correlation_id == 99
    assert [c for c, _ in got] == list(range(1, PIPELINE + 1))
    assert [p["error_code"] for _, p in got] == [0] * PIPELINE, got
    offsets = [p["base_offset"] for _, p in got]
    assert offsets == list(range(offsets[0], offsets[0] + PIPELINE))
    assert took < 3.0, f"{PIPELINE} pipelined acks=all produces took {took:.1f} s: they waited for each other"


def test_a_consumer_fetch_parked_at_the_leader_is_answered_when_the_high_watermark_passes_a_write(start_cluster):
    """A consumer reads below the high watermark, which moves when the followers' next fetches arrive, not
    at the append: that move must complete the consumer's parked fetch (fetch.max.wait.ms here 5 s)."""
    cluster = start_cluster(3, min_insync_replicas=2)
    cluster.create_topic("watched", partitions=1, replication_factor=3)
    port = cluster.brokers[cluster.leader("watched")].port
    consumer, producer = wire.connect(port, 30), wire.connect(port, 30)
    took = []
    for i in range(10):
        consumer.sendall(fetch_requests.fetch_request(i, "watched", [0], max_wait_ms=5000, min_bytes=1,
                                                      max_bytes=1 << 20, fetch_offset=i))
        time.sleep(0.05)  # parked by now
        started = time.monotonic()
        send_pipeline(producer, "watched", i, 1)
        ((_, part),) = answers(producer, 1)
        assert part["error_code"] == 0 and part["base_offset"] == i, part
        _, body = frames.decode_response("Fetch", 11, memoryview(wire.recv_frame(consumer)))
        took.append(time.monotonic() - started)
        (fetched,) = body["responses"][0]["partitions"]
        assert fetched["error_code"] == 0 and fetched["records"], fetched
    assert max(took) < 1.0, [f"{t * 1000:.0f} ms" for t in took]


def test_an_acks_all_produce_whose_followers_stall_times_out_and_the_one_behind_it_is_answered_after_it(
        start_cluster):
    """Both followers stopped (SIGSTOP, shorter than the ISR's lag time: they stay in the ISR): a Produce with
    a 500 ms timeout is answered REQUEST_TIMED_OUT about then -- its own deadline, not the connection's --
    and an ApiVersions pipelined behind it comes after it; once the followers go on, the next one is
    committed."""
    cluster = start_cluster(3, min_insync_replicas=2)
    cluster.create_topic("stalled", partitions=1, replication_factor=3)
    leader = cluster.leader("stalled")
    followers = [cluster.brokers[n].proc for n in cluster.brokers if n != leader]
    sock = wire.connect(cluster.brokers[leader].port, 30)
    send_pipeline(sock, "stalled", 1, 1)  # connections and fetch sessions are up before the stop
    assert answers(sock, 1)[0][1]["error_code"] == 0
    body = produce_body("stalled", build_batch([(None, b"stalled")]))
    for proc in followers:
        os.kill(proc.pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        sock.sendall(frames.encode_request("Produce", 9, 2, "pipeline", {**body, "timeout_ms": 500})
                     + frames.encode_request("ApiVersions", 3, 3, "pipeline",
                                             {"client_software_name": "t", "client_software_version": "1"}))
        ((correlation_id, part),) = answers(sock, 1)
        took = time.monotonic() - started
        behind, _ = frames.decode_response("ApiVersions", 3, memoryview(wire.recv_frame(sock)))
    finally:
        for proc in followers:
            os.kill(proc.pid, signal.SIGCONT)
    assert (correlation_id, behind) == (2, 3)
    assert part["error_code"] == ErrorCode.REQUEST_TIMED_OUT, part
    assert 0.4 < took < 2.5, f"answered after {took:.2f} s, its timeout being 0.5 s"
    send_pipeline(sock, "stalled", 4, 1)
    assert answers(sock, 1)[0][1]["error_code"] == 0
