"""Requests read but not yet handled (Kafka's ``queued.max.requests``): many connections pipelining
many requests pin a bounded amount of broker memory, and a bystander (tests/helpers/bystander.py)
keeps being answered.

A connection whose request is in progress (here a long-polling Fetch) reads nothing more once a
further request waits behind it, as Kafka mutes a channel with a request in flight: what the client
pipelines meanwhile stays in its socket. Before, such a connection read on until 16 requests waited,
so 16 large requests each -- 10 connections x 12 x 4 MiB pinned ~500 MiB.

Connections also take turns: one handles at most 16 requests before the others, so thousands
pipelined on a few connections do not keep a bystander waiting.
"""

from __future__ import annotations

import socket
import threading
import time

import pytest

from helpers import fetch_requests, wire
from helpers.bystander import Bystander, produce_body
from helpers.reliability import peak_rss_mib, record_result
from protocol import frames
from protocol.records import build_batch

TOPIC = "parked"
CONNECTIONS = 10
PIPELINED = 12  # requests each connection sends behind its parked Fetch
REQUEST_BYTES = 4 << 20
MEMORY_BOUND_MIB = 150  # peak growth allowed; the old code pinned ~CONNECTIONS x PIPELINED x 4 MiB


def send_all(s: socket.socket, data: bytes, stop: threading.Event) -> None:
    """Send ``data`` as far as the broker takes it, until ``stop`` (the broker may stop reading)."""
    view = memoryview(data)
    while view and not stop.is_set():
        try:
            view = view[s.send(view):]
        except socket.timeout:
            continue
        except OSError:
            return


@pytest.mark.timeout(120)
def test_pipelined_requests_behind_a_parked_one_are_not_read(start_broker):
    # fewer places than parked connections: a parked request, or one behind it, must hold none
    b = start_broker({"socket.request.max.bytes": 8 << 20, "queued.max.requests": CONNECTIONS // 2})
    with wire.WireClient(b.port) as c:
        c.request("CreateTopics", 5, {"topics": [{"name": TOPIC, "num_partitions": 1, "replication_factor": 1,
                                                  "assignments": [], "configs": []}],
                                      "timeout_ms": 10000, "validate_only": False})
    big = frames.encode_request("Produce", 9, 2, "pipeliner",
                                produce_body(TOPIC, build_batch([(None, bytes(REQUEST_BYTES))])))
    baseline = peak_rss_mib(b.pid)
    stop = threading.Event()
    held, senders = [], []
    try:
        with Bystander(b.port, "bystander") as bystander:
            for _ in range(CONNECTIONS):
                s = wire.connect(b.port)
                s.settimeout(0.5)
                # a Fetch that waits for data that never comes, then large requests pipelined behind it
                s.sendall(fetch_requests.fetch_request(1, TOPIC, [0], max_wait_ms=60_000, min_bytes=1))
                sender = threading.Thread(target=send_all, args=(s, big * PIPELINED, stop), daemon=True)
                sender.start()
                held.append(s)
                senders.append(sender)
            time.sleep(4)  # the broker takes what it will take
            peak = peak_rss_mib(b.pid)
        bystander.check()
    finally:
        stop.set()
        for s in held:
            s.close()
    assert b.alive(), b.log_tail()
    grown = peak - baseline
    record_result("pipelined_behind_parked", connections=CONNECTIONS, pipelined=f"{PIPELINED} x 4 MiB",
                  baseline_rss_mib=round(baseline, 1), peak_rss_mib=round(peak, 1),
                  bystander_worst_seconds=round(bystander.worst, 3))
    assert grown < MEMORY_BOUND_MIB, f"peak RSS grew by {grown:.0f} MiB (from {baseline:.0f})"
    with wire.connect(b.port) as s:  # and it lets go of them all
        wire.api_versions_roundtrip(s, 2)


PIPELINING_CONNECTIONS = 20
REQUESTS_EACH = 5000
QUEUED_MAX_REQUESTS = 100  # fewer than the connections' turns (20 x 16): the bound bites


def drain(s: socket.socket, expected: int, answered: list[int]) -> None:
    """Read ``expected`` responses off ``s`` (counted into ``answered``)."""
    count = 0
    try:
        while count < expected:
            wire.recv_frame(s)
            count += 1
    except OSError:
        pass
    answered.append(count)


@pytest.mark.timeout(120)
def test_connections_pipelining_thousands_of_requests_take_turns(start_broker):
    """20 connections each pipeline 5,000 ApiVersions requests in one go (and read the answers): each
    connection handles a few per turn, so the bystander's requests are answered between them, and when
    queued.max.requests are waiting the connections take turns reading. Before, a connection handled
    all it had read before anyone else, and the bystander waited for them all (up to 12 s)."""
    b = start_broker({"queued.max.requests": QUEUED_MAX_REQUESTS})
    burst = b"".join(wire.api_versions_v0(i) for i in range(REQUESTS_EACH))
    answered: list[int] = []
    conns, readers = [], []
    with Bystander(b.port, "bystander") as bystander:
        time.sleep(0.5)
        for _ in range(PIPELINING_CONNECTIONS):
            s = wire.connect(b.port, timeout=60)
            reader = threading.Thread(target=drain, args=(s, REQUESTS_EACH, answered), daemon=True)
            reader.start()
            conns.append(s)
            readers.append(reader)
        for s in conns:
            s.sendall(burst)
        for reader in readers:
            reader.join(90)
    for s in conns:
        s.close()
    record_result("pipelining_connections", connections=PIPELINING_CONNECTIONS, requests_each=REQUESTS_EACH,
                  bystander_worst_seconds=round(bystander.worst, 3), bystander_p99_seconds=round(bystander.p99, 3))
    assert answered == [REQUESTS_EACH] * PIPELINING_CONNECTIONS
    bystander.check()
