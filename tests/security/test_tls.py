"""SSL listeners with stock clients: server-authenticated and mutual TLS; refused handshakes are logged and
close that connection only."""

from __future__ import annotations

import socket
import ssl
import time

import pytest

from helpers.kafka import admin, producer
from helpers.security import (
    aiokafka_round_trip, java_round_trip, java_tls, kafka_python_round_trip, librdkafka_round_trip, librdkafka_tls,
    python_tls_context, sent, tls_listener,
)
from helpers.startup import error_lines, serve_refused
from helpers.wire import api_versions_v0

pytestmark = pytest.mark.timeout(180)


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
    assert librdkafka_round_trip(broker.bootstrap, "tls-confluent", 50, librdkafka_tls(certs)) == sent("tls-confluent", 50)
    md = admin(broker.bootstrap, **librdkafka_tls(certs)).list_topics(timeout=20)
    assert [(b.host, b.port) for b in md.brokers.values()] == [("127.0.0.1", broker.port)]


@pytest.mark.parametrize("client_auth", ["none", "required"])
def test_kafka_python_over_ssl(start_broker, certs, client_auth):
    broker = start_broker(tls_listener(certs, client_auth=client_auth))
    got = kafka_python_round_trip(broker.bootstrap, "tls-kafka-python", 20, security_protocol="SSL",
                                  ssl_context=python_tls_context(certs, client_cert=client_auth == "required"))
    assert got == sent("tls-kafka-python", 20)


def test_aiokafka_over_mutual_tls(start_broker, certs):
    broker = start_broker(tls_listener(certs, client_auth="required"))
    got = aiokafka_round_trip(broker.bootstrap, "tls-aiokafka", 20, security_protocol="SSL",
                              ssl_context=python_tls_context(certs, client_cert=True))
    assert got == sent("tls-aiokafka", 20)


def test_java_over_mutual_tls(start_broker, certs, java):
    broker = start_broker(tls_listener(certs, client_auth="required"))
    java_round_trip(java, broker.bootstrap, "tls-java", 30, java_tls(certs, client_cert=True))


def test_mutual_tls_refuses_clients_without_a_trusted_certificate_and_logs_them(start_broker, certs):
    broker = start_broker({**tls_listener(certs), "listener.name.ssl.ssl.client.auth": "required"})
    since = broker.log_offset()
    no_cert = ssl.create_default_context(cafile=str(certs.ca))
    rogue = ssl.create_default_context(cafile=str(certs.ca))
    rogue.load_cert_chain(str(certs.rogue_cert), str(certs.rogue_key))
    for context in (no_cert, rogue):
        assert refused(broker.port, context)
    broker.wait_for_log("PEER_DID_NOT_RETURN_A_CERTIFICATE", since=since)
    broker.wait_for_log("CERTIFICATE_VERIFY_FAILED", since=since)

    # librdkafka without a certificate gets nothing; with alice's, everything
    p, errors = producer(broker.bootstrap, **librdkafka_tls(certs), message_timeout_ms=3000)
    outcome = []
    p.produce("mtls", b"x", on_delivery=lambda err, msg: outcome.append(err))
    p.flush(20)
    assert outcome and outcome[0] is not None and errors, (outcome, errors)
    assert librdkafka_round_trip(broker.bootstrap, "mtls", 5, librdkafka_tls(certs, client_cert=True)) == sent("mtls", 5)


def test_plaintext_client_and_stalled_handshake_close_only_their_connection(start_broker, certs):
    broker = start_broker(tls_listener(certs))
    since = broker.log_offset()
    stalled = socket.create_connection(("127.0.0.1", broker.port))  # sends nothing
    plaintext = socket.create_connection(("127.0.0.1", broker.port))
    plaintext.sendall(api_versions_v0(1))
    assert closed_by_broker(plaintext)
    broker.wait_for_log(r"TLS handshake with 127\.0\.0\.1:\d+ failed: .*WRONG_VERSION_NUMBER", since=since)
    # meanwhile a TLS client is served
    assert librdkafka_round_trip(broker.bootstrap, "bystander", 5, librdkafka_tls(certs)) == sent("bystander", 5)
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
