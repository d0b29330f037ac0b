"""Wire fuzzing: mutated real requests against a running broker, with a well-behaved client alongside.

The corpus is every request a confluent-kafka session sent (captured by a
relay the broker advertises: admin, an idempotent lz4 producer, a consumer
group that commits), a sample of every advertised API version built from
the schemas, and issue 20's abusive requests (Fetches naming a partition thousands of
times, long polls that hang up; old timestamps, new producer ids, names and partitions listed
thousands of times, auto-creation). Each input is one corpus request with 1-4 byte-level edits
(helpers.mutation), re-framed with its new length, or -- one time in ten --
sent with a damaged length prefix and a half-close. For a fixed time budget
the broker must answer or close each input, never die, never log an
unexpected handler exception, and keep answering a bystander connection
promptly; afterwards real clients still produce and consume.

CreateTopics and CreatePartitions are left out of the corpus: a mutated
partition count is a valid request for thousands of partitions, which is
slow admin work rather than bad input (their limit has its own test in
test_resource_limits.py). So is AlterClientQuotas: a mutation can be a valid
quota for every client, which throttles the bystander as it should.
"""

from __future__ import annotations

import random
import socket
import ssl
import struct
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from helpers import wire
from helpers.abusive_requests import abusive_requests
from helpers.fetch_requests import abusive_fetches
from helpers.groups import GROUP_BROKER
from helpers.kafka import consumer, create_topic, flush, make_messages, produce, produce_one, producer, read_from
from helpers.mutation import mutate, random_edits
from helpers.relay import CaptureRelay
from helpers.reliability import budget, peak_rss_mib, record_result
from protocol import frames

sys.path.insert(0, str(Path(__file__).parents[1] / "protocol"))  # the schema-built samples of the protocol tests
from schema_samples import VARIANTS, advertised_versions, sample  # noqa: E402

TOPIC = "fuzz-target"
SECONDS = budget(20, 300, "MOLDAU_CHAOS_FUZZ_SECONDS")
ANSWER_TIMEOUT = 1.0  # an input neither answered nor closed by then is dropped (a long poll, acks=0)
WORST_BYSTANDER_LATENCY = 5.0
LEFT_OUT = {frames.API_KEYS["CreateTopics"], frames.API_KEYS["CreatePartitions"], frames.API_KEYS["AlterClientQuotas"]}


def capture_client_session(start_broker) -> list[bytes]:
    """The request frames of a confluent-kafka session: admin, idempotent producer, group consumer."""
    relay = CaptureRelay()
    b = start_broker(GROUP_BROKER, {"advertised.listeners": f"PLAINTEXT://127.0.0.1:{relay.port}"})
    relay.upstream_port = b.port
    try:
        bootstrap = f"127.0.0.1:{relay.port}"
        create_topic(bootstrap, TOPIC, partitions=3)
        p, _ = producer(bootstrap, enable_idempotence=True, compression_type="lz4", linger_ms=20)
        produce(p, TOPIC, make_messages(300, 3, seed=8))
        flush(p)
        c, _ = consumer(bootstrap, group_id="fuzz-capture", auto_offset_reset="earliest", enable_auto_offset_store=True)
        c.subscribe([TOPIC])
        deadline, got = time.monotonic() + 30, 0
        while got < 300 and time.monotonic() < deadline:
            got += sum(m.error() is None for m in c.consume(500, 0.5))
        c.commit(asynchronous=False)
        c.close()
        assert got == 300, f"capture session consumed {got} of 300 records"
    finally:
        relay.close()
        b.stop()
    return relay.frames


def schema_samples() -> list[bytes]:
    """A request of every advertised API version, in each sample variant."""
    return [frames.encode_request(name[: -len("Request")], version, 7, "fuzz", sample(name, version, variant))
            for name, version in advertised_versions(kinds=("Request",)) for variant in VARIANTS]


class Bystander(threading.Thread):
    """A well-behaved connection: ApiVersions and Metadata every 50 ms, timing each round trip."""

    def __init__(self, port: int, client: wire.WireClient | None = None) -> None:
        super().__init__(daemon=True)
        self.client = client or wire.WireClient(port, timeout=30)
        self.stopped = threading.Event()
        self.round_trips = 0
        self.worst = 0.0
        self.error: str | None = None

    def run(self) -> None:
        while not self.stopped.is_set():
            started = time.monotonic()
            try:
                wire.api_versions_roundtrip(self.client.sock, self.round_trips)
                self.client.request("Metadata", 1, {"topics": [{"name": TOPIC}]})
            except Exception as exc:  # noqa: BLE001 -- any failure is the finding; the test reports it
                self.error = repr(exc)
                return
            self.worst = max(self.worst, time.monotonic() - started)
            self.round_trips += 1
            self.stopped.wait(0.05)


def assert_unharmed(b, bystander: Bystander, seed: int) -> None:
    """After fuzzing: the broker lives, logged no unexpected handler exception, and served the bystander."""
    assert b.alive(), f"the broker died while fuzzed (seed {seed}):\n{b.log_tail(40)}"
    assert bystander.error is None, f"the bystander connection failed (seed {seed}): {bystander.error}"
    assert bystander.round_trips > 0 and bystander.worst < WORST_BYSTANDER_LATENCY, (
        f"bystander: {bystander.round_trips} round trips, worst {bystander.worst:.2f}s (seed {seed})")
    failures = b.log_text().count("handler failed")
    assert failures == 0, f"{failures} unexpected handler exceptions (seed {seed}):\n{b.log_tail(60)}"


def send_one(port: int, sock: socket.socket | None, data: bytes, half_close: bool) -> tuple[str, socket.socket | None]:
    """Send one input; (answered | closed | silent, the connection to reuse or None)."""
    sock = sock or wire.connect(port, timeout=ANSWER_TIMEOUT)
    try:
        sock.sendall(data)
        if half_close:
            sock.shutdown(socket.SHUT_WR)
        wire.recv_frame(sock)
        if not half_close:
            return "answered", sock
        outcome = "answered"
    except socket.timeout:
        outcome = "silent"
    except (ConnectionError, OSError):
        outcome = "closed"
    sock.close()
    return outcome, None


def fuzz(port: int, corpus: list[bytes], rng: random.Random, seconds: float) -> Counter:
    outcomes: Counter = Counter()
    sock = None
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        frame = rng.choice(corpus)
        edits = random_edits(rng)
        if rng.random() < 0.1:  # the length prefix is fair game too; the half-close ends a short frame
            outcome, _ = send_one(port, None, mutate(frame, edits), half_close=True)
        else:
            payload = mutate(frame[4:], edits)
            outcome, sock = send_one(port, sock, struct.pack(">i", len(payload)) + payload, half_close=False)
        outcomes[outcome] += 1
    if sock is not None:
        sock.close()
    return outcomes


@pytest.mark.timeout(budget(180, 900))
def test_fuzzed_requests_never_stall_other_clients(start_broker):
    abusive = abusive_fetches(TOPIC) + abusive_requests(TOPIC)
    corpus = [f for f in capture_client_session(start_broker) + schema_samples() + abusive
              if struct.unpack_from(">h", f, 4)[0] not in LEFT_OUT]
    captured_apis = {frames.API_NAMES.get(struct.unpack_from(">h", f, 4)[0]) for f in corpus}
    assert {"Produce", "Fetch", "JoinGroup", "SyncGroup", "OffsetCommit", "InitProducerId"} <= captured_apis

    b = start_broker()
    create_topic(b.bootstrap, TOPIC, partitions=3)
    p, _ = producer(b.bootstrap)
    produce(p, TOPIC, make_messages(300, 3, seed=9))
    flush(p)
    seed = random.randrange(1 << 30)
    print(f"fuzzing for {SECONDS}s with seed {seed}")
    bystander = Bystander(b.port)
    bystander.start()
    outcomes = fuzz(b.port, corpus, random.Random(seed), SECONDS)
    bystander.stopped.set()
    bystander.join(35)

    assert_unharmed(b, bystander, seed)
    # real clients are served as before
    offset = produce_one(p, TOPIC, 0, b"after", b"fuzzing")
    assert read_from(b.bootstrap, TOPIC, 0, offset, offset + 1)[0][2] == b"fuzzing"
    peak = peak_rss_mib(b.pid)
    record_result("wire_fuzz", seconds=SECONDS, seed=seed, corpus=len(corpus), inputs=sum(outcomes.values()),
                  outcomes=dict(outcomes), bystander_round_trips=bystander.round_trips,
                  bystander_worst_seconds=round(bystander.worst, 3), broker_peak_rss_mib=round(peak, 1))


# ---- the TLS and SASL paths: handshake garbage, mutated and oversized SASL tokens ----------------------

SASL_SECONDS = budget(10, 120, "MOLDAU_CHAOS_FUZZ_SECONDS")
PLAIN_JAAS = 'org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="alice-secret";'


def client_hello(context: ssl.SSLContext) -> bytes:
    """The first flight of a TLS client: what a handshake fuzzer mutates."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context.wrap_bio(incoming, outgoing, server_hostname="localhost")
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


def sasl_tokens(rng: random.Random) -> bytes:
    """A SASL token: a mutated PLAIN or SCRAM message, random bytes, or one over sasl.server.max.receive.size."""
    kind = rng.randrange(4)
    if kind == 0:
        return mutate(b"\0alice\0alice-secret", random_edits(rng))
    if kind == 1:
        return mutate(b"n,,n=alice,r=fyko+d2lbbFgONRv9qkxdawL", random_edits(rng))
    if kind == 2:
        return rng.randbytes(rng.randrange(0, 300))
    return b"\0" * rng.randrange(520_000, 700_000)


def fuzz_tls_and_sasl(port: int, context: ssl.SSLContext, rng: random.Random, seconds: float) -> Counter:
    hello = client_hello(context)
    outcomes: Counter = Counter()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=ANSWER_TIMEOUT) as raw:
                if rng.random() < 0.4:  # handshake garbage: a mutated ClientHello, or bytes that are no TLS at all
                    raw.sendall(mutate(hello, random_edits(rng)) if rng.random() < 0.7 else rng.randbytes(200))
                    outcomes["closed" if wire.wait_closed(raw, ANSWER_TIMEOUT)[0] else "silent"] += 1
                    continue
                with context.wrap_socket(raw, server_hostname="localhost") as tls:
                    mechanism = rng.choice(["PLAIN", "SCRAM-SHA-512", "GSSAPI", "plain"])
                    tls.sendall(frames.encode_request("SaslHandshake", 1, 1, "fuzz", {"mechanism": mechanism}))
                    wire.recv_frame(tls)
                    request = frames.encode_request("SaslAuthenticate", rng.randrange(3), 2, "fuzz",
                                                    {"auth_bytes": sasl_tokens(rng)})
                    if rng.random() < 0.3:
                        request = mutate(request, random_edits(rng))
                    tls.sendall(request)
                    wire.recv_frame(tls)
                    outcomes["answered"] += 1
        except socket.timeout:
            outcomes["silent"] += 1
        except (ConnectionError, OSError, ssl.SSLError):
            outcomes["closed"] += 1
    return outcomes


@pytest.mark.timeout(budget(120, 600))
def test_fuzzed_tls_handshakes_and_sasl_tokens_never_stall_other_clients(start_broker, certs):
    from helpers.security import librdkafka_round_trip, librdkafka_tls, python_tls_context, sent, tls_listener

    b = start_broker({**tls_listener(certs, protocol="SASL_SSL"), "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
                      "sasl.jaas.config": PLAIN_JAAS, "connection.failed.authentication.delay.ms": 0})
    context = python_tls_context(certs)
    client = wire.WireClient(b.port, timeout=30, tls=context)
    client.request("SaslHandshake", 1, {"mechanism": "PLAIN"})
    assert client.request("SaslAuthenticate", 2, {"auth_bytes": b"\0alice\0alice-secret"})["error_code"] == 0
    seed = random.randrange(1 << 30)
    print(f"fuzzing TLS and SASL for {SASL_SECONDS}s with seed {seed}")
    bystander = Bystander(b.port, client)
    bystander.start()
    outcomes = fuzz_tls_and_sasl(b.port, context, random.Random(seed), SASL_SECONDS)
    bystander.stopped.set()
    bystander.join(35)

    assert_unharmed(b, bystander, seed)
    assert outcomes["answered"] > 0 and outcomes["closed"] > 0, outcomes
    alice = {**librdkafka_tls(certs, protocol="SASL_SSL"), "sasl.mechanism": "PLAIN", "sasl.username": "alice",
             "sasl.password": "alice-secret"}
    assert librdkafka_round_trip(b.bootstrap, "after-fuzz", 3, alice) == sent("after-fuzz", 3)
    record_result("tls_sasl_fuzz", seconds=SASL_SECONDS, seed=seed, inputs=sum(outcomes.values()),
                  outcomes=dict(outcomes), bystander_worst_seconds=round(bystander.worst, 3))
