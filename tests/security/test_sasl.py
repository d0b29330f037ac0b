"""SASL_SSL and SASL_PLAINTEXT listeners with stock clients: PLAIN users from the JAAS config, SCRAM users
made with AdminClient.alter_user_scram_credentials; refused logins are delayed, logged once without a
secret, and close the connection; nothing but ApiVersions and SASL is served before authentication."""

from __future__ import annotations

import time

import pytest
from confluent_kafka.admin import ScramCredentialInfo, ScramMechanism, UserScramCredentialDeletion
from confluent_kafka.admin import UserScramCredentialUpsertion

from helpers.kafka import admin, producer
from helpers.security import (
    aiokafka_round_trip, java_round_trip, java_tls, kafka_python_round_trip, librdkafka_round_trip, librdkafka_tls,
    python_tls_context, sent, tls_listener,
)
from helpers.startup import error_lines, serve_refused
from helpers.wire import WireClient, recv_frame, wait_closed
from protocol.frames import encode_request

pytestmark = pytest.mark.timeout(180)

PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
              'user_admin="admin-secret" user_alice="alice-secret";')
BOB_PASSWORD = "bob-scram-secret"


def sasl_ssl_broker(start_broker, certs, **extra):
    return start_broker({
        **tls_listener(certs, protocol="SASL_SSL"),
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_JAAS,
    }, **extra)


def librdkafka_sasl(certs, mechanism: str, user: str, password: str) -> dict:
    return {**librdkafka_tls(certs, protocol="SASL_SSL"), "sasl.mechanism": mechanism,
            "sasl.username": user, "sasl.password": password}


def add_scram_user(bootstrap: str, certs, user: str, password: str, *mechanisms: ScramMechanism) -> None:
    """As an operator would: AdminClient over the listener, logged in with PLAIN."""
    a = admin(bootstrap, **librdkafka_sasl(certs, "PLAIN", "admin", "admin-secret"))
    upserts = [UserScramCredentialUpsertion(user, ScramCredentialInfo(m, 8192), password.encode()) for m in mechanisms]
    for future in a.alter_user_scram_credentials(upserts).values():
        future.result(30)


def refused(bootstrap: str, conf: dict) -> str:
    """A librdkafka producer that must not get in: its first error."""
    p, errors = producer(bootstrap, **conf, message_timeout_ms=4000)
    outcome = []
    p.produce("never", b"x", on_delivery=lambda err, msg: outcome.append(err))
    p.flush(20)
    assert outcome and outcome[0] is not None, outcome
    return errors[0] if errors else str(outcome[0])


def test_confluent_kafka_plain_and_scram_over_sasl_ssl(start_broker, certs):
    broker = sasl_ssl_broker(start_broker, certs)
    plain = librdkafka_sasl(certs, "PLAIN", "alice", "alice-secret")
    assert librdkafka_round_trip(broker.bootstrap, "sasl-plain", 20, plain) == sent("sasl-plain", 20)

    add_scram_user(broker.bootstrap, certs, "bob", BOB_PASSWORD, ScramMechanism.SCRAM_SHA_256,
                   ScramMechanism.SCRAM_SHA_512)
    for mechanism in ("SCRAM-SHA-512", "SCRAM-SHA-256"):
        conf = librdkafka_sasl(certs, mechanism, "bob", BOB_PASSWORD)
        assert librdkafka_round_trip(broker.bootstrap, mechanism, 20, conf) == sent(mechanism, 20)

    # what is stored lets no one log in: neither the password nor the salted password
    stored = (broker.data_dir / "scram-credentials.json").read_text()
    assert "bob" in stored and BOB_PASSWORD not in stored
    assert oct((broker.data_dir / "scram-credentials.json").stat().st_mode & 0o777) == "0o600"


def test_scram_credentials_are_described_deleted_and_survive_a_restart(start_broker, certs):
    broker = sasl_ssl_broker(start_broker, certs)
    add_scram_user(broker.bootstrap, certs, "bob", BOB_PASSWORD, ScramMechanism.SCRAM_SHA_512)
    add_scram_user(broker.bootstrap, certs, "carol", "carol-secret", ScramMechanism.SCRAM_SHA_256)
    broker.restart()
    a = admin(broker.bootstrap, **librdkafka_sasl(certs, "PLAIN", "admin", "admin-secret"))
    described = a.describe_user_scram_credentials().result(30)
    assert {u: [(i.mechanism, i.iterations) for i in d.scram_credential_infos] for u, d in described.items()} == {
        "bob": [(ScramMechanism.SCRAM_SHA_512, 8192)], "carol": [(ScramMechanism.SCRAM_SHA_256, 8192)]}
    bob = librdkafka_sasl(certs, "SCRAM-SHA-512", "bob", BOB_PASSWORD)
    assert librdkafka_round_trip(broker.bootstrap, "after-restart", 5, bob) == sent("after-restart", 5)

    a.alter_user_scram_credentials([UserScramCredentialDeletion("bob", ScramMechanism.SCRAM_SHA_512)])["bob"].result(30)
    assert "Authentication failed" in refused(broker.bootstrap, bob)
    with pytest.raises(Exception, match="RESOURCE_NOT_FOUND|does not exist"):
        a.describe_user_scram_credentials(["bob"])["bob"].result(30)
    bad = a.alter_user_scram_credentials([UserScramCredentialUpsertion(
        "dave", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 1000), b"x")])
    with pytest.raises(Exception, match="UNACCEPTABLE_CREDENTIAL|iterations"):
        bad["dave"].result(30)


@pytest.mark.parametrize("client", [kafka_python_round_trip, aiokafka_round_trip])
def test_kafka_python_and_aiokafka_with_plain_and_scram(start_broker, certs, client):
    broker = sasl_ssl_broker(start_broker, certs)
    add_scram_user(broker.bootstrap, certs, "bob", BOB_PASSWORD, ScramMechanism.SCRAM_SHA_512)
    tls = dict(security_protocol="SASL_SSL", ssl_context=python_tls_context(certs))
    for mechanism, user, password in (("PLAIN", "alice", "alice-secret"), ("SCRAM-SHA-512", "bob", BOB_PASSWORD)):
        topic = f"{client.__name__}-{mechanism}"
        got = client(broker.bootstrap, topic, 10, **tls, sasl_mechanism=mechanism, sasl_plain_username=user,
                     sasl_plain_password=password)
        assert got == sent(topic, 10)


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
def test_java_over_sasl_ssl(start_broker, certs, java, mechanism):
    broker = sasl_ssl_broker(start_broker, certs)
    if mechanism == "PLAIN":
        module, user, password = "plain.PlainLoginModule", "alice", "alice-secret"
    else:
        add_scram_user(broker.bootstrap, certs, "bob", BOB_PASSWORD, ScramMechanism.SCRAM_SHA_512)
        module, user, password = "scram.ScramLoginModule", "bob", BOB_PASSWORD
    conf = {**java_tls(certs, protocol="SASL_SSL"), "sasl.mechanism": mechanism,
            "sasl.jaas.config": f'org.apache.kafka.common.security.{module} required '
                                f'username="{user}" password="{password}";'}
    java_round_trip(java, broker.bootstrap, "sasl-java", 20, conf)


def test_wrong_passwords_and_unknown_users_are_refused_delayed_and_logged_once(start_broker, certs):
    broker = sasl_ssl_broker(start_broker, certs, connection_failed_authentication_delay_ms=400)
    add_scram_user(broker.bootstrap, certs, "bob", BOB_PASSWORD, ScramMechanism.SCRAM_SHA_512)
    attempts = [("PLAIN", "alice", "wrong-plain-secret"), ("PLAIN", "nobody", "nobody-secret"),
                ("SCRAM-SHA-512", "bob", "wrong-scram-secret"), ("SCRAM-SHA-512", "nobody", "nobody-secret")]
    for mechanism, user, password in attempts:
        since = broker.log_offset()
        error = refused(broker.bootstrap, librdkafka_sasl(certs, mechanism, user, password))
        assert "Authentication failed" in error, error
        line = broker.wait_for_log(rf"closing connection from 127\.0\.0\.1:\d+: failed authentication "
                                   rf"\(mechanism {mechanism}, user '{user}'\)", since=since)
        assert password not in broker.log_since(since), line
    assert "secret" not in "".join(l for l in broker.log_text().splitlines(True) if "harness" not in l)

    # on the wire: SASL_AUTHENTICATION_FAILED after the delay, then the connection is closed
    with WireClient(broker.port, timeout=20, tls=python_tls_context(certs)) as c:
        assert c.request("SaslHandshake", 1, {"mechanism": "PLAIN"})["error_code"] == 0
        started = time.monotonic()
        answer = c.request("SaslAuthenticate", 2, {"auth_bytes": b"\0alice\0wrong"})
        assert time.monotonic() - started >= 0.35
        assert answer["error_code"] == 58 and "Invalid username or password" in answer["error_message"]
        assert wait_closed(c.sock)[0]


def test_nothing_but_sasl_before_authentication(start_broker, certs):
    broker = start_broker({
        "listeners": "SASL_PLAINTEXT://127.0.0.1:{port}",
        "sasl.enabled.mechanisms": "PLAIN",
        "sasl.jaas.config": PLAIN_JAAS,
    })
    metadata = {"topics": None, "allow_auto_topic_creation": False,
                "include_cluster_authorized_operations": False, "include_topic_authorized_operations": False}
    since = broker.log_offset()
    with WireClient(broker.port) as c:  # ApiVersions is answered, Metadata closes the connection
        assert c.request("ApiVersions", 3, {"client_software_name": "t", "client_software_version": "1"})[
            "error_code"] == 0
        c.sock.sendall(encode_request("Metadata", 12, 9, "t", metadata))
        assert wait_closed(c.sock)[0]
    broker.wait_for_log(r"closing connection from 127\.0\.0\.1:\d+: Metadata request before SASL authentication",
                        since=since)

    with WireClient(broker.port) as c:  # an unknown mechanism: the enabled ones, then the close
        answer = c.request("SaslHandshake", 1, {"mechanism": "GSSAPI"})
        assert (answer["error_code"], answer["mechanisms"]) == (33, ["PLAIN"])
        assert wait_closed(c.sock)[0]

    with WireClient(broker.port) as c:  # a token over sasl.server.max.receive.size is not even read
        c.sock.sendall(encode_request("SaslHandshake", 1, 1, "t", {"mechanism": "PLAIN"}))
        recv_frame(c.sock)
        c.sock.sendall(encode_request("SaslAuthenticate", 2, 2, "t", {"auth_bytes": b"\0" * 600_000})[:70_000])
        assert wait_closed(c.sock)[0]

    # authenticated, everything is served; a second handshake is refused from a client that authenticated
    # with SaslAuthenticate v0, which cannot re-authenticate (from v1 it begins a re-authentication, KIP-368)
    with WireClient(broker.port) as c:
        assert c.request("SaslHandshake", 1, {"mechanism": "PLAIN"})["error_code"] == 0
        assert c.request("SaslAuthenticate", 0, {"auth_bytes": b"\0alice\0alice-secret"})["error_code"] == 0
        assert c.request("Metadata", 12, metadata)["brokers"][0]["port"] == broker.port
        assert c.request("SaslHandshake", 1, {"mechanism": "PLAIN"})["error_code"] == 34
        assert wait_closed(c.sock)[0]


@pytest.mark.parametrize("overrides, words", [
    ({}, ["GSSAPI", "not implemented"]),
    ({"sasl.enabled.mechanisms": "PLAIN"}, ["PLAIN", "sasl.jaas.config"]),
    ({"sasl.enabled.mechanisms": "PLAIN", "sasl.jaas.config": "PlainLoginModule"}, ["sasl.jaas.config"]),
    ({"sasl.enabled.mechanisms": "OAUTHBEARER"}, ["OAUTHBEARER", "not implemented"]),
])
def test_sasl_listeners_the_broker_cannot_serve_stop_it(tmp_path, overrides, words):
    result = serve_refused({"listeners": "SASL_PLAINTEXT://127.0.0.1:0", "log.dirs": tmp_path, **overrides})
    lines = error_lines(result)
    assert result.returncode == 2 and len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert all(word in lines[0] for word in words), lines[0]
