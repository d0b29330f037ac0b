"""Authorization with Kafka's StandardAuthorizer semantics, driven by stock clients over SASL: ACLs made
with AdminClient take effect at once and survive a restart; a principal without ACLs can do nothing;
super users bypass ACLs; exactly the ACLs Kafka's documentation gives a transactional producer and a
consumer group run the exactly-once copy app."""

from __future__ import annotations

import json
import time

import pytest
from confluent_kafka import Consumer, KafkaException, TopicCollection
from confluent_kafka.admin import (
    AclBinding, AclBindingFilter, AclOperation, AclPermissionType, ConfigResource, NewTopic, ResourcePatternType,
    ResourceType,
)

from conftest import free_port
from helpers.groups import GROUP_BROKER
from helpers.kafka import COMMON, admin, producer
from helpers.reliability import WorkloadProcess, assert_verified, group_caught_up, wait_for
from helpers.security import librdkafka_round_trip, librdkafka_tls, sent, tls_listener
from helpers.wire import WireClient, wait_closed
from protocol.frames import encode_request

pytestmark = pytest.mark.timeout(240)

USERS = {"admin": "admin-secret", "alice": "alice-secret", "nobody": "nobody-secret", "copier": "copier-secret"}
JAAS = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
        + " ".join(f'user_{u}="{p}"' for u, p in USERS.items()) + ";")
AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


def acl_broker(start_broker, **extra):
    """SASL_PLAINTEXT on the test's port for users, and a PLAINTEXT listener whose anonymous principal is
    a super user (an internal listener, for setting up and checking)."""
    internal = free_port()
    broker = start_broker({
        "listeners": f"SASL_PLAINTEXT://127.0.0.1:{{port}},PLAINTEXT://127.0.0.1:{internal}",
        "sasl.enabled.mechanisms": "PLAIN",
        "sasl.jaas.config": JAAS,
        "authorizer.class.name": AUTHORIZER,
        "super.users": "User:admin;User:ANONYMOUS",
        **extra,
    })
    broker.internal = f"127.0.0.1:{internal}"
    return broker


def login(user: str) -> dict:
    return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": user,
            "sasl.password": USERS[user]}


def allow(principal: str, resource_type, name: str, *operations, pattern=ResourcePatternType.LITERAL) -> list:
    return [AclBinding(resource_type, name, pattern, principal, "*", op, AclPermissionType.ALLOW)
            for op in operations]


def create_acls(bootstrap: str, bindings: list, **conf) -> None:
    client = admin(bootstrap, **conf)  # referenced until the answers are in
    for future in client.create_acls(bindings).values():
        future.result(30)


def create_topics(bootstrap: str, *names: str, partitions: int = 1) -> None:
    client = admin(bootstrap)
    for future in client.create_topics([NewTopic(n, partitions) for n in names]).values():
        future.result(30)


def produce_error(bootstrap: str, topic: str, conf: dict) -> str | None:
    """The delivery error of one record (None: delivered)."""
    p, _ = producer(bootstrap, **conf, message_timeout_ms=8000)
    outcome = []
    p.produce(topic, b"x", on_delivery=lambda err, msg: outcome.append(err))
    p.flush(30)
    return None if outcome[0] is None else outcome[0].name()


def consume_error(bootstrap: str, topic: str, group: str, conf: dict) -> str:
    """A group member subscribed to ``topic``: the first error it gets."""
    c = Consumer({**COMMON, "bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest", **conf})
    c.subscribe([topic])
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is not None:
                return m.error().name()
        raise AssertionError(f"no error consuming {topic} as {conf.get('sasl.username')}")
    finally:
        c.close()


def test_a_principal_without_acls_can_do_nothing_and_super_users_everything(start_broker):
    broker = acl_broker(start_broker)
    create_acls(broker.internal, [
        *allow("User:alice", ResourceType.TOPIC, "alice-", AclOperation.ALL, pattern=ResourcePatternType.PREFIXED),
        *allow("User:alice", ResourceType.GROUP, "alice-", AclOperation.READ, pattern=ResourcePatternType.PREFIXED),
    ])
    create_topics(broker.internal, "secret", "alice-data")
    nobody = login("nobody")

    assert produce_error(broker.bootstrap, "secret", nobody) == "TOPIC_AUTHORIZATION_FAILED"
    client = admin(broker.bootstrap, **nobody)
    assert client.list_topics(timeout=20).topics == {}  # not even the names
    with pytest.raises(KafkaException, match="TOPIC_AUTHORIZATION_FAILED|authoriz"):
        client.create_topics([NewTopic("mine", 1)])["mine"].result(30)
    assert consume_error(broker.bootstrap, "secret", "nobodys", nobody) == "GROUP_AUTHORIZATION_FAILED"
    with WireClient(broker.port) as c:  # an API checked for super users only closes the connection
        c.request("SaslHandshake", 1, {"mechanism": "PLAIN"})
        c.request("SaslAuthenticate", 2, {"auth_bytes": b"\0nobody\0nobody-secret"})
        lists = c.request("ListGroups", 4, {"states_filter": []})
        assert lists["groups"] == []
        init = c.request("InitProducerId", 4, {"transactional_id": "t", "transaction_timeout_ms": 10000,
                                                "producer_id": -1, "producer_epoch": -1})
        assert init["error_code"] == 53  # TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        acls = c.request("DescribeAcls", 3, {"resource_type_filter": 1, "resource_name_filter": None,
                                             "pattern_type_filter": 1, "principal_filter": None, "host_filter": None,
                                             "operation": 1, "permission_type": 1})
        assert acls["error_code"] == 31  # CLUSTER_AUTHORIZATION_FAILED (librdkafka's describe_acls drops it)
        configs = c.request("DescribeConfigs", 4, {
            "resources": [{"resource_type": 2, "resource_name": "secret", "configuration_keys": None}],
            "include_synonyms": False, "include_documentation": False})
        assert configs["results"][0]["error_code"] == 29 and configs["results"][0]["configs"] == []
        c.sock.sendall(encode_request("OffsetDelete", 0, 99, "t", {"group_id": "g", "topics": []}))
        assert wait_closed(c.sock)[0]
    broker.wait_for_log("OffsetDelete from User:nobody refused: only super users may send it")

    # alice may use her prefix, and only it; the super user anything
    alice = {**login("alice"), "group.id": "alice-readers"}
    assert librdkafka_round_trip(broker.bootstrap, "alice-data", 3, alice) == sent("alice-data", 3)
    assert consume_error(broker.bootstrap, "secret", "alice-readers", login("alice")) == "TOPIC_AUTHORIZATION_FAILED"
    assert produce_error(broker.bootstrap, "secret", login("alice")) == "TOPIC_AUTHORIZATION_FAILED"
    assert librdkafka_round_trip(broker.bootstrap, "secret", 5, login("admin")) == sent("secret", 5)
    client = admin(broker.bootstrap, **login("admin"))
    assert list(client.describe_configs([ConfigResource("topic", "secret")]).values())[0].result(30)


def test_acls_take_effect_at_once_deny_wins_and_they_survive_a_restart(start_broker):
    broker = acl_broker(start_broker)
    a = admin(broker.internal)
    create_topics(broker.internal, "orders")
    alice = login("alice")
    assert produce_error(broker.bootstrap, "orders", alice) == "TOPIC_AUTHORIZATION_FAILED"

    create_acls(broker.internal, allow("User:alice", ResourceType.TOPIC, "orders", AclOperation.WRITE))
    assert produce_error(broker.bootstrap, "orders", alice) is None  # at once, no reconnect needed
    deny = AclBinding(ResourceType.TOPIC, "ord", ResourcePatternType.PREFIXED, "User:*", "127.0.0.1",
                      AclOperation.WRITE, AclPermissionType.DENY)
    create_acls(broker.internal, [deny])
    assert produce_error(broker.bootstrap, "orders", alice) == "TOPIC_AUTHORIZATION_FAILED"

    everything = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                                  AclPermissionType.ANY)
    before = sorted(map(str, a.describe_acls(everything).result(30)))
    assert len(before) == 2
    broker.restart()
    a = admin(broker.internal)
    assert sorted(map(str, a.describe_acls(everything).result(30))) == before
    assert produce_error(broker.bootstrap, "orders", alice) == "TOPIC_AUTHORIZATION_FAILED"

    deny_filter = AclBindingFilter(ResourceType.TOPIC, "orders", ResourcePatternType.MATCH, None, None,
                                   AclOperation.ANY, AclPermissionType.DENY)
    deleted = a.delete_acls([deny_filter])[deny_filter].result(30)
    assert [str(d) for d in deleted] == [str(deny)]
    assert produce_error(broker.bootstrap, "orders", alice) is None
    assert json.loads((broker.data_dir / "acls.json").read_text())[0]["principal"] == "User:alice"


def test_documented_acls_run_the_exactly_once_copy_app(start_broker, tmp_path):
    broker = acl_broker(start_broker, **{k.replace(".", "_"): v for k, v in GROUP_BROKER.items()})
    topic, output, group, txn_id = "copy-in", "copy-out", "copiers", "copier-1"
    create_topics(broker.internal, topic, output, partitions=2)
    # kafka-acls.sh --add --allow-principal User:copier --consumer --topic copy-in --group copiers
    # kafka-acls.sh --add --allow-principal User:copier --producer --topic copy-out --transactional-id copier-1
    create_acls(broker.internal, [
        *allow("User:copier", ResourceType.TOPIC, topic, AclOperation.READ, AclOperation.DESCRIBE),
        *allow("User:copier", ResourceType.GROUP, group, AclOperation.READ),
        *allow("User:copier", ResourceType.TOPIC, output, AclOperation.WRITE, AclOperation.DESCRIBE,
               AclOperation.CREATE),
        *allow("User:copier", ResourceType.TRANSACTIONAL_ID, txn_id, AclOperation.WRITE, AclOperation.DESCRIBE),
    ])
    journal = tmp_path / "journal"
    source = WorkloadProcess("transactional-producer", broker.internal, journal, "source", topic=topic,
                             partitions=2, rate=400, txn_size=5, abort_every=4)
    copier = WorkloadProcess("copy-app", broker.bootstrap, journal, txn_id, topic=topic, output=output, group=group,
                             client_config=json.dumps(login("copier")))
    try:
        wait_for(lambda: (journal / f"{txn_id}.jsonl").exists()
                 and (journal / f"{txn_id}.jsonl").read_bytes().count(b'"kind":"txn"') >= 5, 90,
                 "the copier's first transactions")
        assert source.stop(60) == 0, source.stderr_tail()
        wait_for(lambda: group_caught_up(broker.internal, group, topic, 2), 90, "the copier to catch up")
    finally:
        codes = {"source": source.stop(30), "copier": copier.stop(30)}
    assert codes == {"source": 0, "copier": 0}, copier.stderr_tail()
    assert_verified(broker.internal, journal)
    assert "denied User:copier" not in broker.log_text()


def described_operations(bootstrap: str, topic: str, group: str, **conf) -> tuple[set, set, set]:
    """The authorized operations librdkafka's admin reports for a topic, the cluster and a group."""
    client = admin(bootstrap, **conf)
    t = client.describe_topics(TopicCollection([topic]), include_authorized_operations=True)[topic].result(30)
    c = client.describe_cluster(include_authorized_operations=True).result(30)
    g = client.describe_consumer_groups([group], include_authorized_operations=True)[group].result(30)
    return ({op.name for op in t.authorized_operations}, {op.name for op in c.authorized_operations},
            {op.name for op in g.authorized_operations})


def test_authorized_operations_without_an_authorizer_are_all_of_them(broker):
    create_topics(broker.bootstrap, "ops")
    topic, cluster, group = described_operations(broker.bootstrap, "ops", "some-group")
    assert topic == {"READ", "WRITE", "CREATE", "DELETE", "ALTER", "DESCRIBE", "DESCRIBE_CONFIGS", "ALTER_CONFIGS"}
    assert cluster == {"CREATE", "CLUSTER_ACTION", "DESCRIBE_CONFIGS", "ALTER_CONFIGS", "IDEMPOTENT_WRITE", "ALTER",
                       "DESCRIBE"}
    assert group == {"READ", "DESCRIBE", "DELETE", "DESCRIBE_CONFIGS", "ALTER_CONFIGS"}


def test_authorized_operations_are_what_the_principal_may_do(start_broker):
    broker = acl_broker(start_broker)
    create_topics(broker.internal, "ops")
    create_acls(broker.internal, [
        *allow("User:alice", ResourceType.TOPIC, "ops", AclOperation.READ, AclOperation.ALTER_CONFIGS),
        *allow("User:alice", ResourceType.BROKER, "kafka-cluster", AclOperation.DESCRIBE),
        *allow("User:alice", ResourceType.GROUP, "g", AclOperation.DELETE),
    ])
    topic, cluster, group = described_operations(broker.bootstrap, "ops", "g", **login("alice"))
    # Read and AlterConfigs imply Describe and DescribeConfigs
    assert topic == {"READ", "DESCRIBE", "ALTER_CONFIGS", "DESCRIBE_CONFIGS"}
    assert cluster == {"DESCRIBE"}
    assert group == {"DELETE", "DESCRIBE"}


def test_a_client_certificates_subject_is_its_principal(start_broker, certs):
    internal = free_port()
    broker = start_broker({
        **tls_listener(certs, client_auth="required"),
        "listeners": f"SSL://127.0.0.1:{{port}},PLAINTEXT://127.0.0.1:{internal}",
        "authorizer.class.name": AUTHORIZER,
        "super.users": "User:ANONYMOUS",
    })
    create_topics(f"127.0.0.1:{internal}", "certified")
    alice = librdkafka_tls(certs, client_cert=True)
    assert produce_error(broker.bootstrap, "certified", alice) == "TOPIC_AUTHORIZATION_FAILED"
    broker.wait_for_log(f"denied User:{certs.client_subject} from 127.0.0.1: (Describe|Write) on Topic 'certified'")
    create_acls(f"127.0.0.1:{internal}", allow(f"User:{certs.client_subject}", ResourceType.TOPIC, "certified",
                                               AclOperation.WRITE))
    assert produce_error(broker.bootstrap, "certified", alice) is None
