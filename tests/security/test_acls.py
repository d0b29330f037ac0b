"""Authorization with Kafka's StandardAuthorizer semantics, driven by stock clients over SASL: ACLs made
with AdminClient take effect at once and survive a restart; a principal without ACLs can do nothing;
super users bypass ACLs; exactly the ACLs Kafka's documentation gives a transactional producer and a
consumer group run the exactly-once copy app."""

from __future__ import annotations

import json
import time

import pytest
from confluent_kafka import Consumer, KafkaException, TopicCollection
from confluent_kafka import TopicPartition as ConfluentPartition
from confluent_kafka.admin import (
    AclBinding, AclBindingFilter, AclOperation, AclPermissionType, ConfigResource, NewTopic, ResourcePatternType,
    ResourceType,
)

from kafka import TopicPartition
from kafka.admin import AbortTransactionSpec, KafkaAdminClient
from kafka.protocol.admin.topics import ElectionType
from kafka.errors import (
    ClusterAuthorizationFailedError, GroupAuthorizationFailedError, NoError, TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailedError,
)

from conftest import free_port
from helpers.groups import GROUP_BROKER
from helpers.kafka import COMMON, admin, producer
from helpers.reliability import WorkloadProcess, assert_verified, group_caught_up, wait_for
from helpers.security import librdkafka_round_trip, librdkafka_tls, sent, tls_listener
from helpers.wire import WireClient

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
    with WireClient(broker.port) as c:
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
        deleted = c.request("OffsetDelete", 0, {"group_id": "g", "topics": []})
        assert deleted["error_code"] == 30  # GROUP_AUTHORIZATION_FAILED

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
    # DescribeCluster needs no ACL, as in Kafka; without Describe on the cluster it lists no operations
    # (kafka-python sends DescribeCluster; librdkafka's describe_cluster sends Metadata)
    nobody = kafka_python_admin(broker.bootstrap, "nobody")
    try:
        described = nobody.describe_cluster()
        assert len(described["brokers"]) == 1 and not described["authorized_operations"]
    finally:
        nobody.close()


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


def kafka_python_admin(bootstrap: str, user: str) -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers=bootstrap, security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
                            sasl_plain_username=user, sasl_plain_password=USERS[user], request_timeout_ms=15000)


def test_admin_apis_answer_authorization_errors_and_go_ahead_once_allowed(start_broker):
    """DeleteRecords, OffsetDelete, DescribeLogDirs, ElectLeaders, the reassignment APIs and WriteTxnMarkers
    answer Kafka's *_AUTHORIZATION_FAILED codes to a principal without the ACL (they used to close the
    connection for anyone but super users), and do their work once the ACL is there."""
    broker = acl_broker(start_broker)
    create_topics(broker.internal, "ledger")
    p, _ = producer(broker.internal)
    for i in range(5):
        p.produce("ledger", b"x%d" % i)
    p.flush(30)
    c = Consumer({**COMMON, "bootstrap.servers": broker.internal, "group.id": "auditors", "enable.auto.commit": False})
    c.commit(offsets=[ConfluentPartition("ledger", 0, 3)], asynchronous=False)
    c.close()
    create_acls(broker.internal, [
        *allow("User:alice", ResourceType.TOPIC, "ledger", AclOperation.READ),
        *allow("User:alice", ResourceType.GROUP, "auditors", AclOperation.READ),
    ])
    tp = TopicPartition("ledger", 0)
    alice = kafka_python_admin(broker.bootstrap, "alice")
    try:
        with pytest.raises(TopicAuthorizationFailedError):
            alice.delete_records({tp: 2})
        with pytest.raises(GroupAuthorizationFailedError):
            alice.delete_group_offsets("auditors", [tp])
        with pytest.raises(ClusterAuthorizationFailedError):
            alice.elect_leaders(ElectionType.PREFERRED, {"ledger": [0]})
        with pytest.raises(ClusterAuthorizationFailedError):
            alice.alter_partition_reassignments({tp: [1]})
        with pytest.raises(ClusterAuthorizationFailedError):
            alice.list_partition_reassignments()
        with pytest.raises(ClusterAuthorizationFailedError):
            alice.abort_transaction(AbortTransactionSpec(tp, producer_id=12345, producer_epoch=0))
        assert [d["log_dirs"] for d in alice.describe_log_dirs()] == [[]]
        with WireClient(broker.port) as wire:  # the error code kafka-python's describe_log_dirs leaves out
            wire.request("SaslHandshake", 1, {"mechanism": "PLAIN"})
            wire.request("SaslAuthenticate", 2, {"auth_bytes": b"\0alice\0alice-secret"})
            assert wire.request("DescribeLogDirs", 4, {"topics": None})["error_code"] == 31
        broker.wait_for_log("denied User:alice from 127.0.0.1: Delete on Topic 'ledger'")

        create_acls(broker.internal, [
            *allow("User:alice", ResourceType.TOPIC, "ledger", AclOperation.DELETE),
            *allow("User:alice", ResourceType.GROUP, "auditors", AclOperation.DELETE),
            *allow("User:alice", ResourceType.BROKER, "kafka-cluster", AclOperation.ALTER, AclOperation.DESCRIBE),
        ])
        assert alice.delete_records({tp: 2})[tp]["low_watermark"] == 2
        assert alice.delete_group_offsets("auditors", [tp]) == {tp: NoError}
        assert alice.list_partition_reassignments() == {}
        alice.elect_leaders(ElectionType.PREFERRED, {"ledger": [0]})  # ELECTION_NOT_NEEDED is not raised
        dirs = alice.describe_log_dirs()
        assert [p["partition_index"] for t in dirs[0]["log_dirs"][0]["topics"] if t["name"] == "ledger"
                for p in t["partitions"]] == [0]
    finally:
        alice.close()


def test_an_idempotent_producer_needs_a_topic_write_no_deny_covers(start_broker):
    """KIP-679: IdempotentWrite on the cluster or Write on some topic; a DENY covering that topic takes it back."""
    broker = acl_broker(start_broker)
    create_topics(broker.internal, "orders")
    create_acls(broker.internal, allow("User:alice", ResourceType.TOPIC, "orders", AclOperation.WRITE))
    idempotent = {**login("alice"), "enable.idempotence": True}
    assert produce_error(broker.bootstrap, "orders", idempotent) is None

    create_acls(broker.internal, [AclBinding(ResourceType.TOPIC, "ord", ResourcePatternType.PREFIXED, "User:alice",
                                             "*", AclOperation.WRITE, AclPermissionType.DENY)])
    with WireClient(broker.port) as c:
        c.request("SaslHandshake", 1, {"mechanism": "PLAIN"})
        c.request("SaslAuthenticate", 2, {"auth_bytes": b"\0alice\0alice-secret"})
        init = c.request("InitProducerId", 4, {"transactional_id": None, "transaction_timeout_ms": 10000,
                                                "producer_id": -1, "producer_epoch": -1})
        assert init["error_code"] == 31  # CLUSTER_AUTHORIZATION_FAILED (librdkafka: a fatal error)

    create_acls(broker.internal, allow("User:alice", ResourceType.BROKER, "kafka-cluster", AclOperation.IDEMPOTENT_WRITE))
    create_acls(broker.internal, allow("User:alice", ResourceType.TOPIC, "other", AclOperation.WRITE))
    with WireClient(broker.port) as c:
        c.request("SaslHandshake", 1, {"mechanism": "PLAIN"})
        c.request("SaslAuthenticate", 2, {"auth_bytes": b"\0alice\0alice-secret"})
        init = c.request("InitProducerId", 4, {"transactional_id": None, "transaction_timeout_ms": 10000,
                                                "producer_id": -1, "producer_epoch": -1})
        assert init["error_code"] == 0


def test_create_topics_answers_what_a_topic_was_made_with_only_to_those_who_may_describe_its_configs(start_broker):
    broker = acl_broker(start_broker)
    create_acls(broker.internal, [*allow("User:alice", ResourceType.TOPIC, "made-", AclOperation.CREATE,
                                         pattern=ResourcePatternType.PREFIXED),
                                  *allow("User:alice", ResourceType.TOPIC, "made-open", AclOperation.DESCRIBE_CONFIGS)])
    topic = {"num_partitions": 2, "replication_factor": -1, "assignments": [], "configs": []}
    with WireClient(broker.port) as c:
        c.request("SaslHandshake", 1, {"mechanism": "PLAIN"})
        c.request("SaslAuthenticate", 2, {"auth_bytes": b"\0alice\0alice-secret"})
        answer = c.request("CreateTopics", 7, {"topics": [{"name": "made-open", **topic}, {"name": "made-closed", **topic}],
                                               "timeout_ms": 30000, "validate_only": False})
    opened, closed = answer["topics"]
    assert (opened["error_code"], opened["topic_config_error_code"], opened["num_partitions"]) == (0, 0, 2)
    assert (closed["error_code"], closed["topic_config_error_code"], closed["num_partitions"]) == (0, 29, -1)


def test_add_partitions_to_txn_from_v4_is_for_brokers(start_broker):
    """Kafka: AddPartitionsToTxn v4+ (the brokers' verification) needs ClusterAction, whatever the
    transactional id's and topics' ACLs."""
    broker = acl_broker(start_broker)
    create_topics(broker.internal, "orders")
    create_acls(broker.internal, [*allow("User:alice", ResourceType.TRANSACTIONAL_ID, "tx", AclOperation.WRITE),
                                  *allow("User:alice", ResourceType.TOPIC, "orders", AclOperation.WRITE)])
    request = {"transactions": [{"transactional_id": "tx", "producer_id": 1, "producer_epoch": 0,
                                 "verify_only": True, "topics": [{"name": "orders", "partitions": [0]}]}]}
    with WireClient(broker.port) as c:
        c.request("SaslHandshake", 1, {"mechanism": "PLAIN"})
        c.request("SaslAuthenticate", 2, {"auth_bytes": b"\0alice\0alice-secret"})
        answer = c.request("AddPartitionsToTxn", 4, request)
        assert (answer["error_code"], answer["results_by_transaction"]) == (31, [])  # CLUSTER_AUTHORIZATION_FAILED
    with WireClient(int(broker.internal.rpartition(":")[2])) as c:  # a broker's principal (a super user here)
        answer = c.request("AddPartitionsToTxn", 4, request)
        assert answer["error_code"] == 0 and answer["results_by_transaction"][0]["transactional_id"] == "tx"


def test_transactions_are_described_as_far_as_the_principal_may_see(start_broker):
    """DescribeTransactions shows only the topics the principal may describe; ListTransactions only the
    transactional ids it may describe (Kafka's KafkaApis)."""
    broker = acl_broker(start_broker)
    create_topics(broker.internal, "public", "hidden")
    open_txns = []
    for txn_id in ("tx-visible", "tx-other"):
        p, _ = producer(broker.internal, **{"transactional.id": txn_id})
        p.init_transactions(30)
        p.begin_transaction()
        p.produce("public", b"a")
        p.produce("hidden", b"b")
        p.flush(30)  # the partitions are in the transaction; it stays open
        open_txns.append(p)
    create_acls(broker.internal, [
        *allow("User:alice", ResourceType.TRANSACTIONAL_ID, "tx-visible", AclOperation.DESCRIBE),
        *allow("User:alice", ResourceType.TOPIC, "public", AclOperation.DESCRIBE),
    ])
    alice = kafka_python_admin(broker.bootstrap, "alice")
    try:
        described = alice.describe_transactions(["tx-visible"])["tx-visible"]
        assert described.topic_partitions == {TopicPartition("public", 0)}
        listed = [t.transactional_id for txns in alice.list_transactions().values() for t in txns]
        assert listed == ["tx-visible"]
        with pytest.raises(TransactionalIdAuthorizationFailedError):
            alice.describe_transactions(["tx-other"])
    finally:
        alice.close()
        for p in open_txns:
            p.abort_transaction(30)
