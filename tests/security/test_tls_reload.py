"""A renewed broker certificate without a restart, as in Kafka: AlterConfigs on the broker sets the
listener's ssl.keystore.location (the same path reloads the file); new connections get the new
certificate, open ones go on; a store that does not load is refused and the listener keeps its own.
The change outlives a restart, as Kafka's dynamic broker configs do."""

from __future__ import annotations

import socket
import ssl

import pytest
import trustme
from confluent_kafka import KafkaException
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from helpers.kafka import admin
from helpers.wire import api_versions_v0, recv_frame

pytestmark = pytest.mark.timeout(120)

KEYSTORE = "listener.name.ssl.ssl.keystore.location"


def served_certificate(port: int, ca: trustme.CA) -> bytes:
    context = ssl.create_default_context()
    ca.configure_trust(context)
    with socket.create_connection(("127.0.0.1", port), timeout=20) as raw:
        with context.wrap_socket(raw, server_hostname="localhost") as tls:
            return tls.getpeercert(binary_form=True)


def der(cert: trustme.LeafCert) -> bytes:
    return ssl.PEM_cert_to_DER_cert(cert.cert_chain_pems[0].bytes().decode())


def set_broker_config(bootstrap: str, ca_path, name: str, value: str | None) -> None:
    """SET ``name`` to ``value`` on broker 1; None DELETEs it (back to server.properties)."""
    client = admin(bootstrap, security_protocol="SSL", ssl_ca_location=str(ca_path))
    operation = AlterConfigOpType.SET if value is not None else AlterConfigOpType.DELETE
    resource = ConfigResource(ResourceType.BROKER, "1", incremental_configs=[
        ConfigEntry(name, value or "", incremental_operation=operation)])
    for future in client.incremental_alter_configs([resource]).values():
        future.result(30)


def test_a_renewed_keystore_is_served_to_new_connections_without_a_restart(start_broker, tmp_path):
    ca = trustme.CA(key_type=trustme.KeyType.RSA)
    ca_path, keystore = tmp_path / "ca.pem", tmp_path / "broker.pem"
    ca.cert_pem.write_to_path(ca_path)
    first = ca.issue_cert("localhost", "127.0.0.1", key_type=trustme.KeyType.RSA)
    first.private_key_and_cert_chain_pem.write_to_path(keystore)
    broker = start_broker({"listeners": "SSL://127.0.0.1:{port}", "ssl.keystore.location": str(keystore),
                           "node.id": 1})
    assert served_certificate(broker.port, ca) == der(first)

    context = ssl.create_default_context()
    ca.configure_trust(context)
    with context.wrap_socket(socket.create_connection(("127.0.0.1", broker.port), timeout=20),
                             server_hostname="localhost") as open_before:
        renewed = ca.issue_cert("localhost", "127.0.0.1", key_type=trustme.KeyType.RSA)
        renewed.private_key_and_cert_chain_pem.write_to_path(keystore)
        assert served_certificate(broker.port, ca) == der(first)  # a changed file alone changes nothing
        set_broker_config(broker.bootstrap, ca_path, KEYSTORE, str(keystore))  # the same path: reloaded
        assert served_certificate(broker.port, ca) == der(renewed)
        open_before.sendall(api_versions_v0(7))  # the connection made before goes on with its own
        assert recv_frame(open_before)[:4] == (7).to_bytes(4, "big")
    broker.wait_for_log("TLS key and trust stores reloaded: " + KEYSTORE)

    with pytest.raises(KafkaException, match="INVALID_CONFIG"):
        set_broker_config(broker.bootstrap, ca_path, KEYSTORE, str(tmp_path / "missing.pem"))
    with pytest.raises(KafkaException, match="INVALID_REQUEST|INVALID_CONFIG"):
        set_broker_config(broker.bootstrap, ca_path, "log.dirs", "/tmp/elsewhere")  # static in Kafka too
    assert served_certificate(broker.port, ca) == der(renewed)


def test_a_keystore_set_at_run_time_outlives_a_restart(start_broker, tmp_path):
    ca = trustme.CA(key_type=trustme.KeyType.RSA)
    ca_path, static, dynamic = tmp_path / "ca.pem", tmp_path / "static.pem", tmp_path / "dynamic.pem"
    ca.cert_pem.write_to_path(ca_path)
    first, second = (ca.issue_cert("localhost", "127.0.0.1", key_type=trustme.KeyType.RSA) for _ in range(2))
    first.private_key_and_cert_chain_pem.write_to_path(static)
    second.private_key_and_cert_chain_pem.write_to_path(dynamic)
    broker = start_broker({"listeners": "SSL://127.0.0.1:{port}", "ssl.keystore.location": str(static),
                           "node.id": 1})
    set_broker_config(broker.bootstrap, ca_path, KEYSTORE, str(dynamic))
    stored = broker.data_dir / "dynamic-broker-configs.json"
    assert stored.stat().st_mode & 0o777 == 0o600  # an inline ssl.keystore.key would be a private key

    broker.restart()
    assert served_certificate(broker.port, ca) == der(second)  # server.properties still names static.pem

    set_broker_config(broker.bootstrap, ca_path, KEYSTORE, None)  # DELETE: back to server.properties
    assert served_certificate(broker.port, ca) == der(first)
    broker.restart()
    assert served_certificate(broker.port, ca) == der(first)

    # a stored store that no longer loads at a start: logged, and the listener serves server.properties'
    set_broker_config(broker.bootstrap, ca_path, KEYSTORE, str(dynamic))
    broker.stop()
    dynamic.unlink()
    offset = broker.log_offset()
    broker.start()
    broker.wait_for_log("dynamic broker configs in .* not applied", since=offset)
    assert served_certificate(broker.port, ca) == der(first)
