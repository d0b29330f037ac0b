"""SASL re-authentication (KIP-368, connections.max.reauth.ms): SaslAuthenticate tells the client its session
lifetime; a client that re-authenticates in time keeps its connection (librdkafka does), one that does not
has it closed at its next request; a re-authentication must keep the mechanism and the user. Java
re-authenticates too."""

from __future__ import annotations

import threading
import time

import pytest

from helpers.kafka import producer
from helpers.wire import WireClient, wait_closed
from protocol.frames import encode_request

pytestmark = pytest.mark.timeout(120)

LIFETIME_MS = 1500
JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
        'user_alice="alice-secret" user_bob="bob-secret";')


@pytest.fixture
def reauth_broker(start_broker):
    return start_broker({
        "listeners": "SASL_PLAINTEXT://127.0.0.1:{port}",
        "sasl.enabled.mechanisms": "PLAIN",
        "sasl.jaas.config": JAAS,
        "connections.max.reauth.ms": LIFETIME_MS,
    })


def login(c: WireClient, user: str, password: str) -> dict:
    assert c.request("SaslHandshake", 1, {"mechanism": "PLAIN"})["error_code"] == 0
    return c.request("SaslAuthenticate", 2, {"auth_bytes": f"\0{user}\0{password}".encode()})


METADATA = {"topics": [], "allow_auto_topic_creation": False, "include_topic_authorized_operations": False}


def test_a_session_that_is_not_renewed_ends_at_its_next_request(reauth_broker):
    with WireClient(reauth_broker.port) as c:
        answer = login(c, "alice", "alice-secret")
        assert (answer["error_code"], answer["session_lifetime_ms"]) == (0, LIFETIME_MS)
        c.request("Metadata", 12, METADATA)
        time.sleep(LIFETIME_MS / 1000 + 0.5)
        c.sock.sendall(encode_request("Metadata", 12, 99, "t", METADATA))
        assert wait_closed(c.sock)[0]
    reauth_broker.wait_for_log("Metadata request after the SASL session of User:alice expired")


def test_a_renewed_session_goes_on_and_must_keep_its_user(reauth_broker):
    with WireClient(reauth_broker.port) as c:
        login(c, "alice", "alice-secret")
        time.sleep(LIFETIME_MS / 1000 + 0.5)
        assert login(c, "alice", "alice-secret")["session_lifetime_ms"] == LIFETIME_MS
        c.request("Metadata", 12, METADATA)  # served: the session was renewed
    reauth_broker.wait_for_log("User:alice re-authenticated from")
    with WireClient(reauth_broker.port) as c:
        login(c, "alice", "alice-secret")
        assert login(c, "bob", "bob-secret")["error_code"] == 58  # SASL_AUTHENTICATION_FAILED
        assert wait_closed(c.sock)[0]
    reauth_broker.wait_for_log("Cannot change principals during re-authentication")


def test_librdkafka_re_authenticates_and_keeps_its_connection(reauth_broker):
    p, errors = producer(reauth_broker.bootstrap, security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
                         sasl_username="alice", sasl_password="alice-secret")
    failed = []
    deadline = time.monotonic() + 4 * LIFETIME_MS / 1000
    sent = 0
    while time.monotonic() < deadline:
        p.produce("renewed", b"%d" % sent, on_delivery=lambda err, msg: failed.append(err) if err else None)
        sent += 1
        p.flush(30)
        time.sleep(0.2)
    assert p.flush(30) == 0 and failed == [] and errors == []
    log = reauth_broker.log_text()
    assert log.count("User:alice re-authenticated") >= 2
    assert "expired (connections.max.reauth.ms)" not in log


def test_java_re_authenticates_and_keeps_its_connection(reauth_broker, java):
    from helpers.java_clients import every

    bootstrap = reauth_broker.bootstrap
    alice = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": "alice",
             "sasl.password": "alice-secret"}
    p, _ = producer(bootstrap, **alice)
    p.produce("followed", b"0")
    assert p.flush(30) == 0
    bob = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.jaas.config":
           'org.apache.kafka.common.security.plain.PlainLoginModule required username="bob" password="bob-secret";'}
    result: dict = {}
    follower = threading.Thread(target=lambda: result.update(
        lines=java.run(bootstrap, "follow", "followed", 1, 3, client_config=bob)), daemon=True)
    follower.start()
    reauth_broker.wait_for_log("User:bob re-authenticated", timeout=60)  # on the connection it fetches on
    p.produce("followed", b"1")
    p.produce("followed", b"2")
    assert p.flush(30) == 0
    follower.join(90)
    assert [r["value"] for r in every(result["lines"], "record")] == [b"0".hex(), b"1".hex(), b"2".hex()]
    assert "expired (connections.max.reauth.ms)" not in reauth_broker.log_text()
