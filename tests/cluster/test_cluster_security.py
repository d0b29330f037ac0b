"""Security in a cluster: ACLs and SCRAM credentials live in etcd, so one made through any broker holds on
every broker at once (each watches the keys), and survives the brokers."""

from __future__ import annotations

import pytest
from confluent_kafka.admin import (
    AclBinding, AclBindingFilter, AclOperation, AclPermissionType, ResourcePatternType, ResourceType,
    ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion,
)

from confluent_kafka.admin import AdminClient

from conftest import free_port
from helpers.cluster import Cluster
from helpers.cluster_txn import consume, transaction, txn_producer
from helpers.kafka import admin, producer
from helpers.security import librdkafka_tls, tls_listener
from helpers.startup import error_lines, serve_refused

pytestmark = pytest.mark.timeout(240)

SECURED = {
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    # the brokers reach each other on the first listener, plaintext and anonymous
    "super.users": "User:ANONYMOUS",
    "sasl.enabled.mechanisms": "SCRAM-SHA-512",
}


def scram(user: str, password: str) -> dict:
    return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": user,
            "sasl.password": password, "message.timeout.ms": 8000}


def produce_error(bootstrap: str, topic: str, conf: dict) -> str | None:
    p, _ = producer(bootstrap, **conf)
    outcome = []
    p.produce(topic, b"x", on_delivery=lambda err, msg: outcome.append(err))
    p.flush(30)
    return None if outcome[0] is None else outcome[0].name()


@pytest.fixture
def secured_cluster(tmp_path):
    """Two brokers, each with a PLAINTEXT listener (first: the brokers' own and the test's setup) and a
    SASL_PLAINTEXT one for users."""
    cluster = Cluster(tmp_path, 2, SECURED)
    for b in cluster.brokers.values():
        b.sasl_bootstrap = f"127.0.0.1:{free_port()}"
        b.overrides["listeners"] = f"PLAINTEXT://127.0.0.1:{{port}},SASL_PLAINTEXT://{b.sasl_bootstrap}"
    try:
        yield cluster.start()
    finally:
        cluster.stop()


def test_acls_and_scram_users_made_on_one_broker_hold_on_the_other(secured_cluster):
    cluster = secured_cluster
    one, two = cluster.brokers[1], cluster.brokers[2]
    cluster.create_topic("ledger", partitions=1, replication_factor=2)

    # both made through broker 1
    a = admin(one.bootstrap)
    upsert = UserScramCredentialUpsertion("alice", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192),
                                          b"alice-secret")
    for future in a.alter_user_scram_credentials([upsert]).values():
        future.result(30)
    write = AclBinding(ResourceType.TOPIC, "ledger", ResourcePatternType.LITERAL, "User:alice", "*",
                       AclOperation.WRITE, AclPermissionType.ALLOW)
    for future in a.create_acls([write]).values():
        future.result(30)

    # used through broker 2 alone: it authenticates alice and lets her write
    alice = scram("alice", "alice-secret")
    cluster.wait_until(lambda: produce_error(two.sasl_bootstrap, "ledger", alice) is None, 60,
                       "alice writing through broker 2")

    # described and removed through broker 2: broker 1 refuses her then
    b = admin(two.bootstrap)  # referenced until its answers are in
    described = b.describe_acls(AclBindingFilter(
        ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY, AclPermissionType.ANY))
    assert [str(b) for b in described.result(30)] == [str(write)]
    deleted = b.delete_acls([AclBindingFilter(
        ResourceType.TOPIC, "ledger", ResourcePatternType.LITERAL, None, None, AclOperation.ANY,
        AclPermissionType.ANY)])
    assert len(list(deleted.values())[0].result(30)) == 1
    cluster.wait_until(lambda: produce_error(one.sasl_bootstrap, "ledger", alice) == "TOPIC_AUTHORIZATION_FAILED",
                       60, "broker 1 to refuse alice")
    assert not (one.data_dir / "acls.json").exists() and not (one.data_dir / "scram-credentials.json").exists()


BROKER_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="broker" '
               'password="broker-secret" user_broker="broker-secret" user_alice="alice-secret";')


class SaslSslCluster(Cluster):
    """Brokers whose only listener is SASL_SSL: the test's clients log in as alice."""

    client_conf: dict = {}

    def admin(self) -> AdminClient:
        return AdminClient({"bootstrap.servers": self.bootstrap, **self.client_conf})

    def known_by(self, node: int, topic: str, partitions: int) -> bool:
        """As Cluster.known_by, over SASL_SSL: a new client that knows only broker ``node`` asks it."""
        client = AdminClient({"bootstrap.servers": f"127.0.0.1:{self.brokers[node].port}", **self.client_conf})
        found = client.list_topics(topic, timeout=10).topics.get(topic)
        return found is not None and found.error is None and len(found.partitions) == partitions and all(
            p.leader >= 0 for p in found.partitions.values())


SCRAM_BROKER_JAAS = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="broker" ' \
                    'password="broker-secret";'
ALICE_JAAS = 'org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="alice-secret";'


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
def test_brokers_with_only_a_sasl_ssl_listener_replicate_from_each_other(tmp_path, certs, mechanism):
    logins = ({"listener.name.sasl_ssl.plain.sasl.jaas.config": BROKER_JAAS} if mechanism == "PLAIN" else
              {"listener.name.sasl_ssl.plain.sasl.jaas.config": ALICE_JAAS,
               "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": SCRAM_BROKER_JAAS})
    cluster = SaslSslCluster(tmp_path, 2, {
        **tls_listener(certs, protocol="SASL_SSL"),
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
        "sasl.mechanism.inter.broker.protocol": mechanism,
        **logins,
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:broker;User:alice",
    })
    cluster.client_conf = {**librdkafka_tls(certs, protocol="SASL_SSL"), "sasl.mechanism": "PLAIN",
                           "sasl.username": "alice", "sasl.password": "alice-secret"}
    try:
        cluster.start()
        if mechanism != "PLAIN":  # the brokers' SCRAM user, shared through etcd
            a = cluster.admin()
            upsert = UserScramCredentialUpsertion("broker", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096),
                                                  b"broker-secret")
            for future in a.alter_user_scram_credentials([upsert]).values():
                future.result(30)
        # waits for the full ISR: each follower's fetcher logged in over TLS as User:broker
        cluster.create_topic("guarded", partitions=2, replication_factor=2)
        p, _ = producer(cluster.bootstrap, **cluster.client_conf, enable_idempotence=True)
        for i in range(20):
            p.produce("guarded", b"%d" % i, partition=i % 2)  # acks=all: each needs its follower's fetch
        assert p.flush(60) == 0
        for node in (1, 2):
            cluster.wait_until(lambda: cluster.log_bytes(node, "guarded", 0) == cluster.log_bytes(3 - node, "guarded", 0)
                               and cluster.log_bytes(node, "guarded", 1) == cluster.log_bytes(3 - node, "guarded", 1),
                               30, "identical replicas")
        # a transaction over both brokers' partitions: the partition leader that does not coordinate it asks
        # the one that does (AddPartitionsToTxn), which sends it its marker, both over SASL_SSL
        tp = txn_producer(cluster, "guarded-app", **cluster.client_conf)
        committed = transaction(tp, [("guarded", 0), ("guarded", 1)], "txn", 5)
        got = consume(cluster, [("guarded", 0), ("guarded", 1)], 20 + len(committed), "read_committed",
                      conf=cluster.client_conf)
        assert sorted(v for _, _, v in got if v.startswith(b"txn")) == sorted(v for _, _, v in committed)
        assert all("denied" not in b.log_text() for b in cluster.brokers.values())
    finally:
        cluster.stop()


@pytest.mark.parametrize("overrides, words", [
    ({}, ["sasl.mechanism.inter.broker.protocol=GSSAPI"]),
    ({"sasl.mechanism.inter.broker.protocol": "PLAIN",
      "sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required user_a="b";'},
     ["username", "password"]),
])
def test_a_sasl_inter_broker_listener_the_brokers_cannot_log_in_to_stops_the_broker(tmp_path, overrides, words):
    result = serve_refused({"listeners": "SASL_PLAINTEXT://127.0.0.1:0", "log.dirs": tmp_path,
                            "sasl.enabled.mechanisms": "PLAIN",
                            "sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required '
                                                'username="a" password="b" user_a="b";',
                            "etcd.connect": "127.0.0.1:1", **overrides})
    lines = error_lines(result)
    assert result.returncode == 2 and len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert all(word in lines[0] for word in words), lines[0]
