"""Certificates made by the test (trustme) and the broker and client settings that use them."""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path

import trustme
from cryptography.hazmat.primitives import serialization


@dataclass(frozen=True)
class Certs:
    ca: Path  # the CA that signed the broker's and alice's certificates
    server: Path  # broker key store: private key and certificate chain
    server_key_pem: str
    server_chain_pem: str
    client_cert: Path  # alice, signed by `ca`
    client_key: Path
    client_pem: Path  # alice's key and certificate in one file (Java's PEM key store)
    rogue_cert: Path  # mallory, signed by a CA the broker does not trust
    rogue_key: Path
    client_subject: str  # alice's subject as Kafka writes it (RFC 2253)


def make_certs(directory: Path, client_cn: str = "alice") -> Certs:
    directory.mkdir(parents=True, exist_ok=True)
    rsa = trustme.KeyType.RSA  # Java's PEM key store reads RSA keys (not trustme's default ECDSA)
    ca, rogue_ca = trustme.CA(key_type=rsa), trustme.CA(key_type=rsa)
    server = ca.issue_cert("localhost", "127.0.0.1", key_type=rsa)
    client = ca.issue_cert(f"{client_cn}.example", common_name=client_cn, organization_name="Moldau Tests",
                           organization_unit_name="security", key_type=rsa)
    rogue = rogue_ca.issue_cert("mallory.example", common_name="mallory", key_type=rsa)
    paths = {name: directory / f"{name}.pem" for name in
             ("ca", "server", "client-cert", "client-key", "client", "rogue-cert", "rogue-key")}
    ca.cert_pem.write_to_path(paths["ca"])
    server.private_key_and_cert_chain_pem.write_to_path(paths["server"])
    client.cert_chain_pems[0].write_to_path(paths["client-cert"])
    client.private_key_pem.write_to_path(paths["client-key"])
    paths["client"].write_bytes(_pkcs8(client.private_key_pem.bytes()) + client.cert_chain_pems[0].bytes())
    rogue.cert_chain_pems[0].write_to_path(paths["rogue-cert"])
    rogue.private_key_pem.write_to_path(paths["rogue-key"])
    return Certs(
        ca=paths["ca"], server=paths["server"],
        server_key_pem=server.private_key_pem.bytes().decode(),
        server_chain_pem="".join(p.bytes().decode() for p in server.cert_chain_pems),
        client_cert=paths["client-cert"], client_key=paths["client-key"], client_pem=paths["client"],
        rogue_cert=paths["rogue-cert"], rogue_key=paths["rogue-key"],
        client_subject=f"CN={client_cn},OU=security,O=Moldau Tests",
    )


def tls_listener(certs: Certs, protocol: str = "SSL", client_auth: str = "none") -> dict[str, str]:
    """Broker overrides: one `protocol` listener on the test's port with the test's key and trust stores."""
    return {
        "listeners": f"{protocol}://127.0.0.1:{{port}}",
        "ssl.keystore.location": str(certs.server),
        "ssl.truststore.location": str(certs.ca),
        "ssl.client.auth": client_auth,
    }


def librdkafka_tls(certs: Certs, client_cert: bool = False, protocol: str = "SSL") -> dict[str, str]:
    conf = {"security.protocol": protocol, "ssl.ca.location": str(certs.ca)}
    if client_cert:
        conf.update({"ssl.certificate.location": str(certs.client_cert), "ssl.key.location": str(certs.client_key)})
    return conf


def python_tls_context(certs: Certs, client_cert: bool = False) -> ssl.SSLContext:
    """For kafka-python (ssl_context) and aiokafka."""
    context = ssl.create_default_context(cafile=str(certs.ca))
    if client_cert:
        context.load_cert_chain(str(certs.client_cert), str(certs.client_key))
    return context


def java_tls(certs: Certs, client_cert: bool = False, protocol: str = "SSL") -> dict[str, str]:
    conf = {"security.protocol": protocol, "ssl.truststore.type": "PEM", "ssl.truststore.location": str(certs.ca)}
    if client_cert:
        conf.update({"ssl.keystore.type": "PEM", "ssl.keystore.location": str(certs.client_pem)})
    return conf


def _pkcs8(key_pem: bytes) -> bytes:
    """Java's PEM key store reads PKCS#8 keys only ("BEGIN PRIVATE KEY")."""
    key = serialization.load_pem_private_key(key_pem, password=None)
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


# ---- a produce/consume round trip through each stock client, with the test's security settings ----

def sent(topic: str, count: int) -> list[bytes]:
    """What the round trips below produce (and must read back) on partition 0 of ``topic``."""
    return [f"{topic}-{i}".encode() for i in range(count)]


def librdkafka_round_trip(bootstrap: str, topic: str, count: int, conf: dict) -> list[bytes]:
    from helpers.kafka import flush, producer, read_from

    p, errors = producer(bootstrap, **conf)
    for value in sent(topic, count):
        p.produce(topic, value, partition=0)
    flush(p)
    assert not errors, errors
    return [got[2] for got in read_from(bootstrap, topic, 0, 0, count, **conf)]


def kafka_python_round_trip(bootstrap: str, topic: str, count: int, **conf) -> list[bytes]:
    from kafka import KafkaConsumer, KafkaProducer

    p = KafkaProducer(bootstrap_servers=bootstrap, **conf)
    for value in sent(topic, count):
        p.send(topic, value, partition=0)
    p.flush(30)
    p.close()
    c = KafkaConsumer(topic, bootstrap_servers=bootstrap, **conf, auto_offset_reset="earliest",
                      consumer_timeout_ms=15000)
    try:
        return [m.value for m in c]
    finally:
        c.close()


def aiokafka_round_trip(bootstrap: str, topic: str, count: int, **conf) -> list[bytes]:
    import asyncio

    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    async def run():
        p = AIOKafkaProducer(bootstrap_servers=bootstrap, **conf)
        await p.start()
        try:
            for value in sent(topic, count):
                await p.send_and_wait(topic, value, partition=0)
        finally:
            await p.stop()
        c = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, **conf, auto_offset_reset="earliest")
        await c.start()
        try:
            values = []
            while len(values) < count:
                batch = await asyncio.wait_for(c.getmany(timeout_ms=1000), 30)
                values += [m.value for msgs in batch.values() for m in msgs]
            return values
        finally:
            await c.stop()

    return asyncio.run(run())


def java_round_trip(java, bootstrap: str, topic: str, count: int, conf: dict) -> None:
    """The Java producer's records come back from the Java consumer, offsets 0..count-1."""
    from helpers.java_clients import every

    acks = every(java.run(bootstrap, "produce", topic, 0, count, "none", client_config=conf), "ack")
    assert [a["offset"] for a in acks] == list(range(count))
    records = every(java.run(bootstrap, "consume", topic, 0, "read_uncommitted", "-", client_config=conf), "record")
    assert [r["value"] for r in records] == [a["value"] for a in acks]
