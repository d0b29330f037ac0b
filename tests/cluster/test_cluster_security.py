"""Security in a cluster: ACLs and SCRAM credentials live in etcd, so one made through any broker holds on
every broker at once (each watches the keys), and survives the brokers."""

from __future__ import annotations

import pytest
from confluent_kafka.admin import (
    AclBinding, AclBindingFilter, AclOperation, AclPermissionType, ResourcePatternType, ResourceType,
    ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion,
)

from conftest import free_port
from helpers.cluster import Cluster
from helpers.kafka import admin, producer

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
