"""Listeners: named listeners through listener.security.protocol.map, and no listener served with less
security than its protocol promises (issue 17, item 2)."""

from __future__ import annotations

import subprocess

import pytest
from confluent_kafka.admin import AdminClient

from conftest import free_port
from helpers.startup import error_lines, serve_refused

pytestmark = pytest.mark.timeout(120)


def serve_until_exit(tmp_path, *overrides: str):
    return serve_refused({"log.dirs": tmp_path / "data", **dict(o.split("=", 1) for o in overrides)})


def assert_refused(result: subprocess.CompletedProcess, *words: str) -> None:
    lines = error_lines(result)
    assert result.returncode == 2, result.stderr
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    for word in words:
        assert word in lines[0], lines[0]


@pytest.mark.parametrize("protocol, words", [
    ("SSL", ["ssl.keystore.location"]),
    ("SASL_PLAINTEXT", ["GSSAPI", "not implemented"]),  # Kafka's default sasl.enabled.mechanisms
    ("SASL_SSL", ["ssl.keystore.location"]),
])
def test_a_listener_the_broker_cannot_secure_is_refused_not_served_as_plaintext(tmp_path, protocol, words):
    result = serve_until_exit(tmp_path, f"listeners={protocol}://127.0.0.1:{free_port()}")
    assert_refused(result, f"listener {protocol}", *words)
    assert not (tmp_path / "data" / "__consumer_offsets-0").exists()  # refused before writing anything


def test_a_named_listener_takes_its_protocol_from_the_map(tmp_path):
    result = serve_until_exit(tmp_path, f"listeners=CLIENT://127.0.0.1:{free_port()}",
                              "listener.security.protocol.map=CLIENT:SASL_PLAINTEXT")
    assert_refused(result, "listener CLIENT", "GSSAPI")


def test_a_listener_name_missing_from_the_map_is_refused(tmp_path):
    result = serve_until_exit(tmp_path, f"listeners=CLIENT://127.0.0.1:{free_port()}")
    assert_refused(result, "CLIENT", "listener.security.protocol.map")


def test_a_bad_protocol_map_is_refused(tmp_path):
    result = serve_until_exit(tmp_path, f"listeners=CLIENT://127.0.0.1:{free_port()}",
                              "listener.security.protocol.map=CLIENT:TLS")
    assert_refused(result, "listener.security.protocol.map", "TLS")


def test_named_plaintext_listeners_serve_clients_with_their_own_advertised_address(start_broker):
    other = free_port()
    broker = start_broker({
        "listeners": f"CLIENT://127.0.0.1:{{port}},REPLICATION://127.0.0.1:{other}",
        "listener.security.protocol.map": "CLIENT:PLAINTEXT,REPLICATION:PLAINTEXT",
    })
    for port in (broker.port, other):
        md = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"}).list_topics(timeout=20)
        assert [(b.host, b.port) for b in md.brokers.values()] == [("127.0.0.1", port)]
    assert f"listening on REPLICATION://127.0.0.1:{other} (PLAINTEXT)" in broker.log_text()


@pytest.mark.parametrize("name, words", [
    ("listener.name.other.ssl.client.auth", ["OTHER"]),
    ("listener.name.plaintext.ssl.clinet.auth", ["unknown", "ssl.clinet.auth"]),
])
def test_a_per_listener_setting_must_name_a_listener_and_a_setting(tmp_path, name, words):
    result = serve_until_exit(tmp_path, f"listeners=PLAINTEXT://127.0.0.1:{free_port()}", f"{name}=required")
    assert_refused(result, name, *words)
