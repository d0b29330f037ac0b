"""A parked consumer fetch is answered within milliseconds of the append it waits for.

The race this guards: a Fetch that finds nothing is read in one turn of the event loop, and an append
handled later in that same turn (another connection's Produce that arrived with it) must still
complete it. Were the fetch parked only when its task first runs, a turn later, that append would find
nobody waiting and the fetch would sit out its whole max_wait_ms -- the consumer's half-second stalls
of issue 26. Each round here sends the Fetch and the Produce back to back on two connections, so they
often arrive together; max_wait_ms is long enough that one missed wake-up cannot pass for load.
"""

from __future__ import annotations

import time

import pytest

from helpers import fetch_requests, wire
from helpers.bystander import produce_body
from protocol import frames
from protocol.records import build_batch

pytestmark = pytest.mark.timeout(120)

MAX_WAIT_MS = 5000
ROUNDS = 60
BOUND_S = 1.0  # a loaded machine's worst round trip stays far below the fetch wait


def fetch_request(correlation_id: int, topic: str, offset: int, isolation: int = 0) -> bytes:
    return fetch_requests.fetch_request(correlation_id, topic, [0], max_wait_ms=MAX_WAIT_MS, min_bytes=1,
                                        max_bytes=1 << 20, fetch_offset=offset, isolation_level=isolation)


def answer(sock, api: str, version: int) -> dict:
    _, body = frames.decode_response(api, version, memoryview(wire.recv_frame(sock)))
    return body


def test_an_append_in_the_turn_of_a_fetch_read_wakes_it(broker):
    topic = "wakeup"
    fetcher, producer = wire.connect(broker.port, 30), wire.connect(broker.port, 30)
    producer.sendall(frames.encode_request("Produce", 9, 0, "wakeup", produce_body(topic, build_batch([(None, b"first")]))))
    answer(producer, "Produce", 9)  # auto-creates the topic (answered UNKNOWN_TOPIC_OR_PARTITION meanwhile)
    deadline = time.monotonic() + 30
    while True:
        producer.sendall(frames.encode_request("Produce", 9, 1, "wakeup", produce_body(topic, build_batch([(None, b"0")]))))
        (part,) = answer(producer, "Produce", 9)["responses"][0]["partition_responses"]
        if part["error_code"] == 0:
            offset = part["base_offset"] + 1
            break
        assert time.monotonic() < deadline, part
        time.sleep(0.1)
    took: list[float] = []
    for i in range(ROUNDS):
        started = time.monotonic()
        fetcher.sendall(fetch_request(i, topic, offset))
        producer.sendall(frames.encode_request("Produce", 9, i, "wakeup",
                                               produce_body(topic, build_batch([(None, b"%d" % i)]), acks=1)))
        (part,) = answer(producer, "Produce", 9)["responses"][0]["partition_responses"]
        assert part["error_code"] == 0 and part["base_offset"] == offset, part
        (fetched,) = answer(fetcher, "Fetch", 11)["responses"][0]["partitions"]
        took.append(time.monotonic() - started)
        assert fetched["error_code"] == 0 and fetched["records"], fetched
        assert took[-1] < BOUND_S, f"round {i}: the fetch waited {took[-1] * 1000:.0f} ms for an append sent with it"
        offset += 1
    print(f"worst round {max(took) * 1000:.1f} ms, rounds over 100 ms: {sum(t > 0.1 for t in took)} of {ROUNDS}")


def test_a_commit_marker_wakes_a_parked_read_committed_fetch(broker):
    from confluent_kafka import Producer

    topic = "wakeup-txn"
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "wakeup", "linger.ms": 0})
    producer.init_transactions(30)
    fetcher = wire.connect(broker.port, 30)
    took = []
    for i in range(5):
        producer.begin_transaction()
        producer.produce(topic, b"%d" % i, partition=0)
        producer.flush(30)
        # the last stable offset stays at the open transaction's first record until its marker
        fetcher.sendall(fetch_request(i, topic, 2 * i, isolation=1))
        time.sleep(0.2)  # the fetch is parked by now
        producer.commit_transaction(30)
        committed = time.monotonic()
        (fetched,) = answer(fetcher, "Fetch", 11)["responses"][0]["partitions"]
        took.append(time.monotonic() - committed)
        assert fetched["error_code"] == 0 and fetched["records"], fetched
    assert max(took) < BOUND_S, [f"{t * 1000:.0f} ms" for t in took]
