"""Hostile input on raw sockets: the broker drops that connection and nothing else.

For each attack: a bystander connection (raw ApiVersions) and a
confluent-kafka producer and consumer are open before it; afterwards the
attacking connection must be closed by the broker within a few seconds, the
broker must still be running and must have logged something about it, and
the bystander, the clients and a brand-new connection must all still work.
"""

from __future__ import annotations

import random
import re
import struct
import time
from dataclasses import dataclass

import pytest
from confluent_kafka import OFFSET_BEGINNING, TopicPartition

from helpers import wire
from helpers.kafka import consumer, create_topic, produce_one, producer

MAX_REQUEST = 1024 * 1024  # socket.request.max.bytes for these brokers
TOPIC = "hostile"


def _random_bytes() -> bytes:
    data = random.Random(5).randbytes(4096)
    (size,) = struct.unpack(">i", data[:4])
    # a length prefix between the data we send and the limit would make the
    # broker (rightly) wait for the rest instead of closing
    assert size < 0 or size > MAX_REQUEST or size <= len(data) - 4, "test bug: pick another seed"
    return data


def _random_framed() -> bytes:
    # a correct length prefix, then garbage; api_key's top bit set = negative key
    body = bytearray(random.Random(6).randbytes(200))
    body[0] |= 0x80
    return wire.frame(bytes(body))


def _oversized() -> bytes:
    # a well-formed ApiVersions request padded to one byte over the limit
    payload = wire.request_header_v1(wire.API_VERSIONS, 0, 4242)
    payload += bytes(MAX_REQUEST + 1 - len(payload))
    return wire.frame(payload)


def _short_produce_body() -> bytes:
    # Produce v3 header, then a body cut off after transactional_id and acks
    return wire.frame(wire.request_header_v1(0, 3, 55) + b"\xff\xff" + b"\xff\xff")


ATTACKS = {
    "random-bytes": _random_bytes,
    "random-framed": _random_framed,
    "huge-length": lambda: struct.pack(">I", 0x7FFFFFFF) + b"little",
    "negative-length": lambda: struct.pack(">i", -1) + b"x" * 16,
    "unknown-api-key": lambda: wire.frame(wire.request_header_v1(9999, 0, 77) + b"\x00" * 8),
    "over-max-request": _oversized,
    "short-produce-body": _short_produce_body,
}

# What "a line about it" may look like: the peer's port, or a word about the problem.
LOG_HINT = re.compile(
    r"(?i)clos|disconnect|invalid|error|bad|unknown|unsupported|too (large|big)|exceed|corrupt|frame|size|malformed|reject|drop|abort"
)


@dataclass
class Env:
    broker: object
    producer: object
    consumer: object
    n: int = 0

    def roundtrip(self, label: str) -> None:
        """Produce one message and read it back through the long-lived clients."""
        value = f"{label} #{self.n}".encode()
        self.n += 1
        off = produce_one(self.producer, TOPIC, 0, b"k", value, timeout=20)
        deadline = time.monotonic() + 20
        while True:
            assert time.monotonic() < deadline, f"consumer did not get offset {off} ({label}) within 20s"
            m = self.consumer.poll(0.5)
            if m is None:
                continue
            assert m.error() is None, f"consumer error ({label}): {m.error()}"
            if m.offset() == off:
                assert m.value() == value
                return


@pytest.fixture
def env(start_broker):
    b = start_broker(socket_request_max_bytes=MAX_REQUEST)
    create_topic(b.bootstrap, TOPIC, partitions=1)
    p, _ = producer(b.bootstrap, message_timeout_ms=20000)
    c, _ = consumer(b.bootstrap)
    c.assign([TopicPartition(TOPIC, 0, OFFSET_BEGINNING)])
    e = Env(b, p, c)
    e.roundtrip("baseline")
    time.sleep(0.3)  # let connection housekeeping log lines settle before attacks
    try:
        yield e
    finally:
        c.close()


def attack_and_check(e: Env, name: str, bystander) -> None:
    b = e.broker
    mark = b.log_offset()
    s = wire.connect(b.port)
    local_port = s.getsockname()[1]
    try:
        try:
            wire.send_ignoring_reset(s, ATTACKS[name]())
        except TimeoutError:
            pass  # the broker stopped reading without closing; wait_closed reports it
        closed, got = wire.wait_closed(s, timeout=5)
    finally:
        s.close()
    assert b.alive(), f"broker died after {name}: exit code {b.proc.returncode}\n{b.log_tail(30)}"
    assert closed, f"{name}: broker kept the connection open 5s later; it sent {len(got)} bytes: {got[:80]!r}"

    # the broker said something about it
    deadline = time.monotonic() + 5
    while True:
        new = b.log_since(mark).splitlines()
        hits = [ln for ln in new if f":{local_port}" in ln or LOG_HINT.search(ln)]
        if hits:
            break
        assert time.monotonic() < deadline, f"{name}: no broker log line about the closed connection (peer port {local_port}); new log: {new[-10:]}"
        time.sleep(0.1)

    # everyone else is fine
    e.roundtrip(f"after {name}")
    wire.api_versions_roundtrip(bystander, correlation_id=1000 + e.n)
    with wire.connect(b.port) as fresh:
        apis = wire.api_versions_roundtrip(fresh, correlation_id=7)
        assert wire.API_VERSIONS in apis
    assert b.alive()


def test_raw_api_versions_baseline(broker):
    """The raw-frame helpers themselves work against the broker (so failures below are not the helpers)."""
    with wire.connect(broker.port) as s:
        apis = wire.api_versions_roundtrip(s, correlation_id=12345)
        assert wire.API_VERSIONS in apis and apis[wire.API_VERSIONS][0] == 0
        for api in (0, 1, 2, 3):  # Produce, Fetch, ListOffsets, Metadata
            assert api in apis, f"api {api} not advertised: {sorted(apis)}"
        # pipelined requests come back in order on one connection
        s.sendall(wire.api_versions_v0(1) + wire.api_versions_v0(2) + wire.api_versions_v0(3))
        assert [wire.parse_api_versions_v0(wire.recv_frame(s))[0] for _ in range(3)] == [1, 2, 3]


def test_raw_frame_dribbled_byte_by_byte(broker):
    """A request arriving one byte at a time is still one request."""
    with wire.connect(broker.port) as s:
        for byte in wire.api_versions_v0(31):
            s.sendall(bytes([byte]))
            time.sleep(0.01)
        corr, err, apis = wire.parse_api_versions_v0(wire.recv_frame(s))
        assert (corr, err) == (31, 0) and wire.API_VERSIONS in apis


def test_api_versions_with_unsupported_version_answers_error_35(broker):
    """KIP-511: an ApiVersions version the broker does not know gets UNSUPPORTED_VERSION in a v0 body."""
    def compact_string(v: bytes) -> bytes:
        return bytes([len(v) + 1]) + v

    # as a client newer than the broker sends it: header v2 (tagged fields),
    # then the v3+ body (client software name and version, tagged fields)
    header = wire.request_header_v1(wire.API_VERSIONS, 127, 41) + b"\x00"
    body = compact_string(b"moldau-test") + compact_string(b"9.9") + b"\x00"
    with wire.connect(broker.port) as s:
        s.sendall(wire.frame(header + body))
        corr, err, apis = wire.parse_api_versions_v0(wire.recv_frame(s))
        assert corr == 41
        assert err == 35, f"error code {err}, expected 35 (UNSUPPORTED_VERSION)"
        assert wire.API_VERSIONS in apis, "the error response still lists supported versions"


@pytest.mark.timeout(90)
@pytest.mark.parametrize("name", list(ATTACKS))
def test_bad_input_closes_only_that_connection(env, name):
    with wire.connect(env.broker.port) as bystander:
        wire.api_versions_roundtrip(bystander, correlation_id=1)
        attack_and_check(env, name, bystander)


@pytest.mark.timeout(120)
def test_all_attacks_in_a_row(env):
    with wire.connect(env.broker.port) as bystander:
        wire.api_versions_roundtrip(bystander, correlation_id=1)
        for _round in range(2):
            for name in ATTACKS:
                attack_and_check(env, name, bystander)
        assert env.broker.alive()


@pytest.mark.timeout(60)
def test_many_connections_dropped_mid_request(env):
    """Clients that vanish halfway through a frame leave the broker serving."""
    b = env.broker
    req = wire.api_versions_v0(9)
    for i in range(50):
        s = wire.connect(b.port)
        s.sendall(req[: 1 + i % (len(req) - 1)])
        s.close()
    env.roundtrip("after half-sent frames")
    with wire.connect(b.port) as s:
        wire.api_versions_roundtrip(s, correlation_id=10)
    assert b.alive()
