"""SSL listeners with stock clients: server-authenticated and mutual TLS; refused handshakes are logged and
close that connection only."""

from __future__ import annotations

import asyncio
import os
import socket
import ssl
import time

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from kafka import KafkaConsumer, KafkaProducer

from helpers.java_clients import JavaClients, JavaUnavailable, every
from helpers.kafka import admin, flush, producer, read_from
from helpers.security import java_tls, librdkafka_tls, make_certs, python_tls_context, tls_listener
from helpers.startup import error_lines, serve_refused
from helpers.wire import api_versions_v0

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def java(tmp_path_factory) -> JavaClients:
    try:
        return JavaClients.build(tmp_path_factory.mktemp("java"))
    except JavaUnavailable as exc:
        if os.environ.get("CI"):
            pytest.fail(f"Java clients unavailable: {exc}", pytrace=False)
        pytest.skip(f"Java clients unavailable: {exc}")


def produce_and_read_librdkafka(bootstrap: str, topic: str, conf: dict, count: int = 50) -> list[bytes]:
    p, errors = producer(bootstrap, **conf)
    for i in range(count):
        p.produce(topic, b"tls-%d" % i, partition=0)
    flush(p)
    assert not errors, errors
    return [got[2] for got in read_from(bootstrap, topic, 0, 0, count, **conf)]


def tls_handshake(port: int, context: ssl.SSLContext) -> str:
    """Handshake with the broker; the TLS version agreed (ssl.SSLError if it refuses)."""
    with socket.create_connection(("127.0.0.1", port), timeout=20) as raw:
        with context.wrap_socket(raw, server_hostname="localhost") as tls:
            return tls.version()


def refused(port: int, context: ssl.SSLContext) -> bool:
    """The broker ends the connection in the handshake or, with TLS 1.3, which reports a refused client
    certificate after the client's side of the handshake is done, before answering a request."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=20) as raw:
            with context.wrap_socket(raw, server_hostname="localhost") as tls:
                tls.sendall(api_versions_v0(1))
                return tls.recv(1) == b""
    except (ssl.SSLError, ConnectionResetError):
        return True


def closed_by_broker(sock: socket.socket, timeout: float = 30) -> bool:
    sock.settimeout(timeout)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def test_confluent_kafka_over_ssl(start_broker, certs):
    broker = start_broker(tls_listener(certs))
    values = produce_and_read_librdkafka(broker.bootstrap, "tls-confluent", librdkafka_tls(certs))
    assert values == [b"tls-%d" % i for i in range(50)]
    md = admin(broker.bootstrap, **librdkafka_tls(certs)).list_topics(timeout=20)
    assert [(b.host, b.port) for b in md.brokers.values()] == [("127.0.0.1", broker.port)]


def test_kafka_python_over_ssl(start_broker, certs):
    broker = start_broker(tls_listener(certs))
    context = python_tls_context(certs)
    p = KafkaProducer(bootstrap_servers=broker.bootstrap, security_protocol="SSL", ssl_context=context)
    for i in range(20):
        p.send("tls-kafka-python", b"kp-%d" % i, partition=0)
    p.flush(30)
    p.close()
    c = KafkaConsumer("tls-kafka-python", bootstrap_servers=broker.bootstrap, security_protocol="SSL",
                      ssl_context=context, auto_offset_reset="earliest", consumer_timeout_ms=15000)
    values = [m.value for m in c]
    c.close()
    assert values == [b"kp-%d" % i for i in range(20)]


def test_aiokafka_over_mutual_tls(start_broker, certs):
    broker = start_broker(tls_listener(certs, client_auth="required"))
    context = python_tls_context(certs, client_cert=True)

    async def run():
        p = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, security_protocol="SSL", ssl_context=context)
        await p.start()
        try:
            for i in range(20):
                await p.send_and_wait("tls-aiokafka", b"aio-%d" % i, partition=0)
        finally:
            await p.stop()
        c = AIOKafkaConsumer("tls-aiokafka", bootstrap_servers=broker.bootstrap, security_protocol="SSL",
                             ssl_context=context, auto_offset_reset="earliest")
        await c.start()
        try:
            values = []
            while len(values) < 20:
                batch = await asyncio.wait_for(c.getmany(timeout_ms=1000), 30)
                values += [m.value for msgs in batch.values() for m in msgs]
            return values
        finally:
            await c.stop()

    assert asyncio.run(run()) == [b"aio-%d" % i for i in range(20)]


def test_java_over_mutual_tls(start_broker, certs, java):
    broker = start_broker(tls_listener(certs, client_auth="required"))
    conf = java_tls(certs, client_cert=True)
    acks = every(java.run(broker.bootstrap, "produce", "tls-java", 0, 30, "none", client_config=conf), "ack")
    assert [a["offset"] for a in acks] == list(range(30))
    records = every(java.run(broker.bootstrap, "consume", "tls-java", 0, "read_uncommitted", "-",
                             client_config=conf), "record")
    assert [r["value"] for r in records] == [a["value"] for a in acks]


def test_mutual_tls_refuses_clients_without_a_trusted_certificate_and_logs_them(start_broker, certs):
    broker = start_broker({**tls_listener(certs), "listener.name.ssl.ssl.client.auth": "required"})
    since = broker.log_offset()
    no_cert = ssl.create_default_context(cafile=str(certs.ca))
    rogue = ssl.create_default_context(cafile=str(certs.ca))
    rogue.load_cert_chain(str(certs.rogue_cert), str(certs.rogue_key))
    for context in (no_cert, rogue):
        assert refused(broker.port, context)
    lines = [line for line in broker.log_since(since).splitlines() if "TLS handshake with 127.0.0.1:" in line]
    assert len(lines) == 2 and all("certificate" in line.lower() for line in lines), lines

    # librdkafka without a certificate gets nothing; with alice's, everything
    p, errors = producer(broker.bootstrap, **librdkafka_tls(certs), message_timeout_ms=3000)
    outcome = []
    p.produce("mtls", b"x", on_delivery=lambda err, msg: outcome.append(err))
    p.flush(20)
    assert outcome and outcome[0] is not None and errors, (outcome, errors)
    values = produce_and_read_librdkafka(broker.bootstrap, "mtls", librdkafka_tls(certs, client_cert=True), 5)
    assert values == [b"tls-%d" % i for i in range(5)]


def test_plaintext_client_and_stalled_handshake_close_only_their_connection(start_broker, certs):
    broker = start_broker(tls_listener(certs))
    since = broker.log_offset()
    stalled = socket.create_connection(("127.0.0.1", broker.port))  # sends nothing
    plaintext = socket.create_connection(("127.0.0.1", broker.port))
    plaintext.sendall(api_versions_v0(1))
    assert closed_by_broker(plaintext)
    broker.wait_for_log(r"TLS handshake with 127\.0\.0\.1:\d+ failed: .*WRONG_VERSION_NUMBER", since=since)
    # meanwhile a TLS client is served
    values = produce_and_read_librdkafka(broker.bootstrap, "bystander", librdkafka_tls(certs), 5)
    assert values == [b"tls-%d" % i for i in range(5)]
    started = time.monotonic()
    assert closed_by_broker(stalled, timeout=60)
    assert time.monotonic() - started < 60
    broker.wait_for_log(r"TLS handshake with 127\.0\.0\.1:\d+ failed: .*taking longer", since=since)
    stalled.close()
    plaintext.close()


def test_key_store_as_pem_text_and_enabled_protocols(start_broker, certs):
    broker = start_broker({
        "listeners": "SSL://127.0.0.1:{port}",
        "ssl.keystore.key": certs.server_key_pem,
        "ssl.keystore.certificate.chain": certs.server_chain_pem,
        "ssl.enabled.protocols": "TLSv1.3",
    })
    context = ssl.create_default_context(cafile=str(certs.ca))
    assert tls_handshake(broker.port, context) == "TLSv1.3"
    context.maximum_version = ssl.TLSVersion.TLSv1_2
    with pytest.raises(ssl.SSLError):
        tls_handshake(broker.port, context)


@pytest.mark.parametrize("overrides, words", [
    ({}, ["ssl.keystore.location"]),
    ({"ssl.keystore.location": "/nonexistent/server.pem"}, ["cannot load"]),
    ({"ssl.keystore.type": "JKS", "ssl.keystore.location": "x"}, ["ssl.keystore.type", "PEM"]),
    ({"ssl.client.auth": "sometimes"}, ["ssl.client.auth"]),
    ({"ssl.enabled.protocols": "TLSv1.1"}, ["ssl.enabled.protocols"]),
])
def test_bad_tls_settings_stop_the_broker_with_one_line(tmp_path, certs, overrides, words):
    config = {"listeners": "SSL://127.0.0.1:0", "log.dirs": tmp_path, "ssl.keystore.location": certs.server,
              **overrides}
    if not overrides:
        del config["ssl.keystore.location"]
    result = serve_refused(config)
    lines = error_lines(result)
    assert result.returncode == 2 and len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert all(word in lines[0] for word in words), lines[0]
