"""The `moldau` admin tools (topics, consumer-groups, configs, acls, transactions, cluster describe) against one
standalone broker, run as an operator runs them, their output parsed and checked against the truth a stock
client (confluent-kafka) sees: lag equal to what was produced minus what a real consumer committed, a reset a
real consumer resumes from, a SCRAM user the tool creates logging in, ACLs the tool adds enforced, and every
failure one line with a non-zero exit.

The broker has a PLAINTEXT listener (anonymous, a super user: the tools' bootstrap) and a SASL_PLAINTEXT one
(PLAIN and SCRAM-SHA-256) for --command-config, with Kafka's StandardAuthorizer semantics.
"""

from __future__ import annotations

import datetime
import re
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicCollection, TopicPartition
from confluent_kafka.admin import (
    AclBindingFilter, AclOperation, AclPermissionType, AdminClient, ConfigResource, ResourcePatternType, ResourceType,
)

from conftest import BrokerProcess, free_port
from helpers.admin_tools import fields, moldau, ok, one_line_failure, table
from helpers.kafka import COMMON
from helpers.reliability import wait_for
from helpers.share import SHARE_BROKER, share_consumer, warm_up
from helpers.consumer_protocol import CONSUMER_GROUPS

pytestmark = pytest.mark.timeout(180)

USERS = {"admin": "admin-secret", "alice": "alice-secret"}
PLAIN_JAAS = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
              + " ".join(f'user_{u}="{p}"' for u, p in USERS.items()) + ";")


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    sasl_port = free_port()
    b = BrokerProcess(tmp_path_factory.mktemp("admin-tools"), {
        "listeners": f"PLAINTEXT://127.0.0.1:{{port}},SASL_PLAINTEXT://127.0.0.1:{sasl_port}",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin;User:ANONYMOUS",
        "group.initial.rebalance.delay.ms": 0, **SHARE_BROKER, **CONSUMER_GROUPS,
    })
    b.start()
    b.sasl_bootstrap = f"127.0.0.1:{sasl_port}"
    yield b
    b.cleanup()


def admin(bootstrap: str, **conf) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, **COMMON, **conf})


def produce(bootstrap: str, topic: str, counts: dict[int, int], timestamp_ms: int | None = None) -> None:
    p = Producer({"bootstrap.servers": bootstrap, **COMMON})
    for partition, n in counts.items():
        for i in range(n):
            p.produce(topic, value=b"v%d" % i, partition=partition,
                      **({"timestamp": timestamp_ms} if timestamp_ms else {}))
    assert p.flush(30) == 0


def committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, **COMMON})
    try:
        asked = [TopicPartition(topic, p) for p in range(partitions)]
        return {tp.partition: tp.offset for tp in c.committed(asked, 30)}
    finally:
        c.close()


def watermarks(bootstrap: str, topic: str, partition: int) -> tuple[int, int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "watermarks", **COMMON})
    try:
        return c.get_watermark_offsets(TopicPartition(topic, partition), 30)
    finally:
        c.close()


def topics_of(bootstrap: str) -> dict:
    return admin(bootstrap).list_topics(timeout=30).topics


def test_topics_create_list_describe_alter_delete(broker):
    bs = broker.bootstrap
    stock = admin(bs)  # referenced until its answers are in
    created = ok(moldau("topics", bs, "--create", "--topic", "orders", "--partitions", "3", "--replication-factor",
                        "1", "--config", "retention.ms=3600000", "--config", "cleanup.policy=compact"))
    assert created == "Created topic orders.\n"
    assert len(topics_of(bs)["orders"].partitions) == 3, "the stock client sees the topic"

    listed = ok(moldau("topics", bs, "--list")).split()
    assert listed == sorted(topics_of(bs)) and "orders" in listed
    assert "__consumer_offsets" not in ok(moldau("topics", bs, "--list", "--exclude-internal")).split()

    head, *lines = ok(moldau("topics", bs, "--describe", "--topic", "orders")).splitlines()
    topic = fields(head)
    description = stock.describe_topics(TopicCollection(["orders"]))["orders"].result(30)
    # Kafka writes a topic id in URL-safe base64 (Uuid.toString); librdkafka in the standard alphabet
    stock_id = str(description.topic_id).replace("+", "-").replace("/", "_")
    assert topic == {"Topic": "orders", "TopicId": stock_id, "PartitionCount": "3",
                     "ReplicationFactor": "1", "Configs": topic["Configs"]}
    assert set(topic["Configs"].split(",")) >= {"retention.ms=3600000", "cleanup.policy=compact"}
    assert [fields(line) for line in lines] == [
        {"Topic": "orders", "Partition": str(p), "Leader": "1", "Replicas": "1", "Isr": "1", "Elr": "N/A",
         "LastKnownElr": "N/A"} for p in range(3)]
    assert all(line.startswith("\t") for line in lines)

    assert ok(moldau("topics", bs, "--alter", "--topic", "orders", "--partitions", "5")) == ""
    wait_for(lambda: len(topics_of(bs)["orders"].partitions) == 5, 30, "the stock client sees 5 partitions")
    assert len(ok(moldau("topics", bs, "--describe", "--topic", "ord.*")).splitlines()) == 1 + 5
    one_line_failure(moldau("topics", bs, "--alter", "--topic", "orders", "--partitions", "2"), "INVALID_PARTITIONS")

    for report in ("--under-replicated-partitions", "--unavailable-partitions", "--under-min-isr-partitions"):
        assert ok(moldau("topics", bs, "--describe", report)) == "", report

    one_line_failure(moldau("topics", bs, "--describe", "--topic", "missing"), "Topic 'missing' does not exist")
    assert ok(moldau("topics", bs, "--describe", "--topic", "missing", "--if-exists")) == ""
    one_line_failure(moldau("topics", bs, "--create", "--topic", "orders", "--partitions", "1"),
                     "TOPIC_ALREADY_EXISTS")
    assert ok(moldau("topics", bs, "--create", "--topic", "orders", "--if-not-exists")) == ""
    one_line_failure(moldau("topics", bs, "--create", "--topic", "x", "--partitions", "0"), "--partitions")
    one_line_failure(moldau("topics", bs, "--create", "--topic", "x", "--config", "novalue"), "name=value")

    assert ok(moldau("topics", bs, "--delete", "--topic", "orders")) == ""
    wait_for(lambda: "orders" not in topics_of(bs), 30, "the stock client no longer sees the topic")


def group_consumer(bootstrap: str, group: str, topic: str, expected: int, client_id: str,
                   **conf) -> tuple[Consumer, dict]:
    """A consumer in ``group`` that has read ``expected`` records of ``topic``; returns it and the last offset
    it read per partition."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "client.id": client_id,
                  "enable.auto.commit": False, "auto.offset.reset": "earliest", **COMMON, **conf})
    c.subscribe([topic])
    seen: dict[int, list[int]] = {}
    deadline = time.monotonic() + 60
    while sum(map(len, seen.values())) < expected:
        assert time.monotonic() < deadline, f"read {seen} of {expected}"
        m = c.poll(1)
        if m is not None and not m.error():
            seen.setdefault(m.partition(), []).append(m.offset())
    return c, seen


def test_consumer_group_lag_is_the_truth(broker):
    bs = broker.bootstrap
    ok(moldau("topics", bs, "--create", "--topic", "lagged", "--partitions", "3", "--replication-factor", "1"))
    produced = {0: 7, 1: 5, 2: 9}
    produce(bs, "lagged", produced)
    consumer, seen = group_consumer(bs, "lag-app", "lagged", sum(produced.values()), "lag-client")
    assert {p: len(offsets) for p, offsets in seen.items()} == produced
    commits = {0: 3, 1: 5}  # partition 2: read, never committed
    consumer.commit(offsets=[TopicPartition("lagged", p, o) for p, o in commits.items()], asynchronous=False)
    member = consumer.memberid()
    try:
        result = moldau("consumer-groups", bs, "--describe", "--group", "lag-app")
        rows = {int(r["PARTITION"]): r for r in table(ok(result))}
        assert set(rows) == {0, 1, 2}
        for p, n in produced.items():
            m = commits.get(p)
            assert rows[p]["GROUP"] == "lag-app" and rows[p]["TOPIC"] == "lagged"
            assert rows[p]["CURRENT-OFFSET"] == (str(m) if m is not None else "-")
            assert rows[p]["LOG-END-OFFSET"] == str(n)
            assert rows[p]["LAG"] == (str(n - m) if m is not None else "-"), rows[p]
            assert (rows[p]["CONSUMER-ID"], rows[p]["CLIENT-ID"]) == (member, "lag-client")
            assert rows[p]["HOST"].lstrip("/") == "127.0.0.1"
        assert result.stderr == ""

        members = table(ok(moldau("consumer-groups", bs, "--describe", "--group", "lag-app", "--members")))
        assert [(r["CONSUMER-ID"], r["CLIENT-ID"], r["#PARTITIONS"]) for r in members] == [(member, "lag-client", "3")]
        state = ok(moldau("consumer-groups", bs, "--describe", "--group", "lag-app", "--state")).splitlines()
        assert state[1].split()[:4] == ["GROUP", "COORDINATOR", "(ID)", "ASSIGNMENT-STRATEGY"]
        assert re.fullmatch(rf"lag-app +{re.escape(bs)}  \(1\) +\S+ +Stable +1", state[2]), state

        assert ok(moldau("consumer-groups", bs, "--list")).split() == ["lag-app"]
        assert table(ok(moldau("consumer-groups", bs, "--list", "--state", "stable"))) == [
            {"GROUP": "lag-app", "STATE": "Stable"}]
        one_line_failure(moldau("consumer-groups", bs, "--reset-offsets", "--group", "lag-app", "--all-topics",
                                "--to-earliest", "--execute"), "inactive", "Stable")
    finally:
        consumer.close()

    result = moldau("consumer-groups", bs, "--describe", "--group", "lag-app")
    rows = {int(r["PARTITION"]): r for r in table(ok(result))}
    assert {p: (r["LAG"], r["CONSUMER-ID"]) for p, r in rows.items()} == {0: ("4", "-"), 1: ("0", "-")}, \
        "without members: the committed partitions, same lag"
    assert "Consumer group 'lag-app' has no active members." in result.stderr

    one_line_failure(moldau("consumer-groups", bs, "--describe", "--group", "nobody-here"), "does not exist")
    assert ok(moldau("consumer-groups", bs, "--delete", "--group", "lag-app")) == \
        "Deletion of requested consumer groups ('lag-app') was successful.\n"
    assert ok(moldau("consumer-groups", bs, "--list")) == ""


def test_kip848_group_described_with_epochs_and_lag(broker):
    """A group.protocol=consumer group: ConsumerGroupDescribe's members, epochs and assignments, lag as for a
    classic group, and --list --type naming it Consumer beside a Classic one."""
    bs = broker.bootstrap
    ok(moldau("topics", bs, "--create", "--topic", "lag848", "--partitions", "2", "--replication-factor", "1"))
    produced = {0: 6, 1: 4}
    produce(bs, "lag848", produced)
    consumer, seen = group_consumer(bs, "app848", "lag848", sum(produced.values()), "c848",
                                    **{"group.protocol": "consumer"})
    commits = {0: 2, 1: 4}
    consumer.commit(offsets=[TopicPartition("lag848", p, o) for p, o in commits.items()], asynchronous=False)
    classic, _ = group_consumer(bs, "classic-app", "lag848", sum(produced.values()), "cc")
    member = consumer.memberid()
    try:
        result = moldau("consumer-groups", bs, "--describe", "--group", "app848")
        rows = {int(r["PARTITION"]): r for r in table(ok(result))}
        assert {p: (r["CURRENT-OFFSET"], r["LOG-END-OFFSET"], r["LAG"], r["CONSUMER-ID"], r["CLIENT-ID"])
                for p, r in rows.items()} == {p: (str(commits[p]), str(n), str(n - commits[p]), member, "c848")
                                              for p, n in produced.items()}
        assert result.stderr == ""

        members = table(ok(moldau("consumer-groups", bs, "--describe", "--group", "app848", "--members", "--verbose")))
        assert len(members) == 1, members
        (m,) = members
        assert (m["CONSUMER-ID"], m["CLIENT-ID"], m["#PARTITIONS"]) == (member, "c848", "2")
        assert m["CURRENT-ASSIGNMENT"] == m["TARGET-ASSIGNMENT"] == "lag848:0,1"
        assert int(m["CURRENT-EPOCH"]) >= 1 and int(m["TARGET-EPOCH"]) >= 1

        state = ok(moldau("consumer-groups", bs, "--describe", "--group", "app848", "--state", "--verbose"))
        header, line = [s for s in state.splitlines() if s.strip()]
        assert header.split()[4:] == ["STATE", "GROUP-EPOCH", "TARGET-ASSIGNMENT-EPOCH", "#MEMBERS"], header
        assert re.fullmatch(rf"app848 +{re.escape(bs)}  \(1\) +uniform +Stable +\d+ +\d+ +1", line), line

        listed = table(ok(moldau("consumer-groups", bs, "--list", "--type", "--state")))
        assert {r["GROUP"]: (r["TYPE"], r["STATE"]) for r in listed if r["GROUP"] in ("app848", "classic-app")} == {
            "app848": ("Consumer", "Stable"), "classic-app": ("Classic", "Stable")}
        only = table(ok(moldau("consumer-groups", bs, "--list", "--type", "consumer")))
        assert [r["GROUP"] for r in only] == ["app848"]
        one_line_failure(moldau("consumer-groups", bs, "--list", "--type", "share"), "--type")
    finally:
        consumer.close()
        classic.close()
    assert ok(moldau("consumer-groups", bs, "--delete", "--group", "app848", "--group", "classic-app"))


def test_share_group_offsets_members_and_state(broker):
    """A share group (confluent-kafka's ShareConsumer): its start offset and lag (the records produced after it
    acknowledged everything it read), its member, its state; deleted once empty."""
    bs = broker.bootstrap
    ok(moldau("topics", bs, "--create", "--topic", "shared", "--partitions", "1", "--replication-factor", "1"))
    consumer = share_consumer(bs, "work", "shared", explicit=True)
    try:
        warm_up(bs, "shared", [consumer], explicit=True)  # what it reads it accepts
        members = table(ok(moldau("share-groups", bs, "--describe", "--group", "work", "--members", "--verbose")))
        assert [(r["#PARTITIONS"], r["ASSIGNMENT"]) for r in members] == [("1", "shared:0")], members
        assert int(members[0]["MEMBER-EPOCH"]) >= 1
        state = [line for line in ok(moldau("share-groups", bs, "--describe", "--group", "work", "--state", "--verbose"))
                 .splitlines() if line.strip()]
        assert state[0].split() == ["GROUP", "COORDINATOR", "(ID)", "STATE", "GROUP-EPOCH", "ASSIGNMENT-EPOCH",
                                    "#MEMBERS"], state
        assert re.fullmatch(rf"work +{re.escape(bs)}  \(1\) +Stable +\d+ +\d+ +1", state[1]), state
        assert table(ok(moldau("share-groups", bs, "--list", "--state"))) == [{"GROUP": "work", "STATE": "Stable"}]
        assert ok(moldau("consumer-groups", bs, "--list")).split().count("work") == 0
    finally:
        consumer.close()
    produce(bs, "shared", {0: 5})
    log_end = watermarks(bs, "shared", 0)[1]
    rows = table(ok(moldau("share-groups", bs, "--describe", "--group", "work")))
    assert [(r["TOPIC"], r["PARTITION"], r["START-OFFSET"], r["LAG"]) for r in rows] == [
        ("shared", "0", str(log_end - 5), "5")], rows
    dry = table(ok(moldau("share-groups", bs, "--reset-offsets", "--group", "work", "--topic", "shared",
                          "--to-latest")))
    assert dry == [{"GROUP": "work", "TOPIC": "shared", "PARTITION": "0", "NEW-OFFSET": str(log_end)}]
    assert table(ok(moldau("share-groups", bs, "--describe", "--group", "work")))[0]["LAG"] == "5", "a dry run"
    ok(moldau("share-groups", bs, "--reset-offsets", "--group", "work", "--all-topics", "--to-latest", "--execute"))
    rows = table(ok(moldau("share-groups", bs, "--describe", "--group", "work")))
    assert [(r["START-OFFSET"], r["LAG"]) for r in rows] == [(str(log_end), "0")], rows
    one_line_failure(moldau("share-groups", bs, "--reset-offsets", "--group", "work", "--all-topics",
                            "--shift-by", "1"), "unrecognized arguments")
    assert ok(moldau("share-groups", bs, "--delete", "--group", "work")) == \
        "Deletion of requested share groups ('work') was successful.\n"
    assert ok(moldau("share-groups", bs, "--list")) == ""


def test_offset_resets_take_effect(broker):
    bs = broker.bootstrap
    ok(moldau("topics", bs, "--create", "--topic", "replay", "--partitions", "2", "--replication-factor", "1"))
    old = int(time.time() * 1000) - 3_600_000
    produce(bs, "replay", {0: 5, 1: 5}, timestamp_ms=old)
    produce(bs, "replay", {0: 5, 1: 5})
    consumer, _ = group_consumer(bs, "replay-app", "replay", 20, "replayer")
    consumer.commit(offsets=[TopicPartition("replay", p, 10) for p in range(2)], asynchronous=False)
    consumer.close()

    def reset(*args: str) -> dict[tuple[str, int], int]:
        out = ok(moldau("consumer-groups", bs, "--reset-offsets", "--group", "replay-app", *args))
        return {(r["TOPIC"], int(r["PARTITION"])): int(r["NEW-OFFSET"]) for r in table(out)}

    assert reset("--topic", "replay", "--to-earliest") == {("replay", 0): 0, ("replay", 1): 0}
    assert reset("--topic", "replay", "--to-earliest", "--dry-run") == {("replay", 0): 0, ("replay", 1): 0}
    assert committed(bs, "replay-app", "replay", 2) == {0: 10, 1: 10}, "a dry run changes nothing"
    assert reset("--topic", "replay", "--to-offset", "0") == {("replay", 0): 0, ("replay", 1): 0}

    assert reset("--topic", "replay:0", "--to-offset", "4", "--execute") == {("replay", 0): 4}
    assert committed(bs, "replay-app", "replay", 2) == {0: 4, 1: 10}
    resumed, seen = group_consumer(bs, "replay-app", "replay", 6, "resumer")
    resumed.close()
    assert seen == {0: [4, 5, 6, 7, 8, 9]}, "a consumer of the group resumes from the reset offset"

    assert reset("--all-topics", "--shift-by", "-3", "--execute") == {("replay", 0): 1, ("replay", 1): 7}
    assert reset("--topic", "replay", "--to-offset", "999", "--execute") == {("replay", 0): 10, ("replay", 1): 10}, \
        "clamped to the log end"
    midpoint = datetime.datetime.fromtimestamp((old + 1_800_000) / 1000, datetime.timezone.utc)
    at = midpoint.strftime("%Y-%m-%dT%H:%M:%S.000+00:00")
    assert reset("--all-topics", "--to-datetime", at, "--execute") == {("replay", 0): 5, ("replay", 1): 5}
    assert committed(bs, "replay-app", "replay", 2) == {0: 5, 1: 5}
    assert reset("--topic", "replay", "--to-latest", "--execute") == {("replay", 0): 10, ("replay", 1): 10}
    assert committed(bs, "replay-app", "replay", 2) == {0: 10, 1: 10}

    one_line_failure(moldau("consumer-groups", bs, "--reset-offsets", "--group", "replay-app", "--to-earliest"),
                     "--topic or --all-topics")
    one_line_failure(moldau("consumer-groups", bs, "--reset-offsets", "--group", "replay-app", "--all-topics"),
                     "--to-earliest")
    one_line_failure(moldau("consumer-groups", bs, "--reset-offsets", "--group", "replay-app", "--all-topics",
                            "--to-datetime", "yesterday"), "--to-datetime")
    one_line_failure(moldau("consumer-groups", bs, "--reset-offsets", "--group", "replay-app", "--topic",
                            "replay:x", "--to-earliest"), "replay:x")


def test_configs_of_topics_brokers_users_and_clients(broker, tmp_path):
    bs = broker.bootstrap
    stock = admin(bs)  # referenced until its answers are in
    ok(moldau("topics", bs, "--create", "--topic", "tuned", "--partitions", "1", "--replication-factor", "1"))
    assert ok(moldau("configs", bs, "--entity-type", "topics", "--entity-name", "tuned", "--alter", "--add-config",
                     "retention.ms=7200000,cleanup.policy=[compact,delete]")) == \
        "Completed updating config for topic tuned.\n"
    truth = stock.describe_configs([ConfigResource("TOPIC", "tuned")])
    entries = next(iter(truth.values())).result(30)
    assert (entries["retention.ms"].value, entries["cleanup.policy"].value) == ("7200000", "compact,delete")

    head, *lines = ok(moldau("configs", bs, "--entity-type", "topics", "--entity-name", "tuned", "--describe"))\
        .splitlines()
    assert head == "Dynamic configs for topic tuned are:"
    assert [line.split()[0] for line in lines] == ["cleanup.policy=compact,delete", "retention.ms=7200000"]
    assert all(" sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:" in line for line in lines)

    ok(moldau("configs", bs, "--entity-type", "topics", "--entity-name", "tuned", "--alter", "--delete-config",
              "cleanup.policy"))
    entries = next(iter(stock.describe_configs([ConfigResource("TOPIC", "tuned")]).values())).result(30)
    assert entries["cleanup.policy"].value == "delete" and entries["cleanup.policy"].is_default
    one_line_failure(moldau("configs", bs, "--entity-type", "topics", "--entity-name", "tuned", "--alter",
                            "--delete-config", "cleanup.policy"), "Invalid config(s): cleanup.policy")
    assert ok(moldau("configs", bs, "--entity-type", "topics", "--entity-name", "gone", "--describe")) == \
        "The topic 'gone' doesn't exist and doesn't have dynamic config.\n"

    every = ok(moldau("configs", bs, "--entity-type", "brokers", "--entity-name", "1", "--describe", "--all"))
    head, *lines = every.splitlines()
    assert head == "All configs for broker 1 are:" and len(lines) > 20
    assert any(line.startswith("  log.retention.hours=168 sensitive=false synonyms={") for line in lines), every
    assert ok(moldau("configs", bs, "--entity-type", "brokers", "--entity-default", "--describe")) == \
        "Default configs for brokers in the cluster are:\n"

    # quotas of a user and of the default client id
    ok(moldau("configs", bs, "--entity-type", "users", "--entity-name", "alice", "--alter", "--add-config",
              "producer_byte_rate=1024,consumer_byte_rate=20000000"))
    ok(moldau("configs", bs, "--entity-type", "clients", "--entity-default", "--alter", "--add-config",
              "request_percentage=50"))
    users = ok(moldau("configs", bs, "--entity-type", "users", "--entity-name", "alice", "--describe"))
    assert users == "Quota configs for user-principal 'alice' are consumer_byte_rate=2.0E7, producer_byte_rate=1024.0\n"
    assert ok(moldau("configs", bs, "--entity-type", "clients", "--entity-default", "--describe")) == \
        "Quota configs for the default client-id are request_percentage=50.0\n"
    ok(moldau("configs", bs, "--entity-type", "clients", "--entity-default", "--alter", "--delete-config",
              "request_percentage"))
    assert ok(moldau("configs", bs, "--entity-type", "clients", "--entity-default", "--describe")) == ""

    # a SCRAM user made by the tool logs in
    scram = {"bootstrap.servers": broker.sasl_bootstrap, "security.protocol": "SASL_PLAINTEXT",
             "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "bob", "sasl.password": "bob-secret", **COMMON}
    with pytest.raises(KafkaException):
        AdminClient({**scram, "socket.timeout.ms": 3000}).list_topics(timeout=3)
    ok(moldau("configs", bs, "--entity-type", "users", "--entity-name", "bob", "--alter", "--add-config",
              "SCRAM-SHA-256=[iterations=8192,password=bob-secret]"))
    assert len(AdminClient(scram).list_topics(timeout=30).brokers) == 1, "bob logs in with SCRAM-SHA-256"
    assert ok(moldau("configs", bs, "--entity-type", "users", "--entity-name", "bob", "--describe")) == \
        "SCRAM credential configs for user-principal 'bob' are SCRAM-SHA-256=iterations=8192\n"

    one_line_failure(moldau("configs", bs, "--entity-type", "users", "--entity-name", "bob", "--alter",
                            "--add-config", "colour=blue"), "colour")
    one_line_failure(moldau("configs", bs, "--entity-type", "brokers", "--entity-name", "one", "--describe"),
                     "broker id")
    one_line_failure(moldau("configs", bs, "--entity-type", "topics", "--entity-name", "tuned", "--alter"),
                     "--add-config")


def test_acls_added_listed_and_removed(broker):
    bs = broker.bootstrap
    stock = admin(bs)  # referenced until its answers are in
    added = ok(moldau("acls", bs, "--add", "--allow-principal", "User:alice", "--operation", "Read",
                      "--operation", "Describe", "--topic", "secret", "--group", "readers"))
    assert "Adding ACLs for resource `ResourcePattern(resourceType=TOPIC, name=secret, patternType=LITERAL)`: \n \t" \
        in added
    assert "\t(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)" in added

    any_acl = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                               AclPermissionType.ANY)
    truth = stock.describe_acls(any_acl).result(30)
    assert sorted((b.restype.name, b.name, b.principal, b.operation.name, b.permission_type.name) for b in truth) == [
        ("GROUP", "readers", "User:alice", "DESCRIBE", "ALLOW"), ("GROUP", "readers", "User:alice", "READ", "ALLOW"),
        ("TOPIC", "secret", "User:alice", "DESCRIBE", "ALLOW"), ("TOPIC", "secret", "User:alice", "READ", "ALLOW")]

    listed = ok(moldau("acls", bs, "--list", "--topic", "secret"))
    assert listed == ("Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=secret, "
                      "patternType=LITERAL)`:\n"
                      "\t(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)\n"
                      "\t(principal=User:alice, host=*, operation=DESCRIBE, permissionType=ALLOW)\n\n"), listed
    assert ok(moldau("acls", bs, "--list")).count("Current ACLs for resource") == 2

    kept = moldau("acls", bs, "--remove", "--topic", "secret", stdin="n\n")
    assert "Are you sure you want to delete all ACLs" in ok(kept)
    assert len(stock.describe_acls(any_acl).result(30)) == 4, "answered no: nothing removed"
    ok(moldau("acls", bs, "--remove", "--force", "--allow-principal", "User:alice", "--operation", "Read",
              "--topic", "secret"))
    ok(moldau("acls", bs, "--remove", "--force", "--group", "readers"))
    left = stock.describe_acls(any_acl).result(30)
    assert [(b.name, b.operation.name) for b in left] == [("secret", "DESCRIBE")]

    one_line_failure(moldau("acls", bs, "--add", "--topic", "secret"), "--allow-principal")
    one_line_failure(moldau("acls", bs, "--add", "--allow-principal", "alice", "--topic", "secret"), "User:alice")
    one_line_failure(moldau("acls", bs, "--add", "--allow-principal", "User:alice", "--operation", "Fly",
                            "--topic", "secret"), "--operation Fly")


def test_transactions_list_describe_and_producers(broker):
    bs = broker.bootstrap
    ok(moldau("topics", bs, "--create", "--topic", "txn", "--partitions", "1", "--replication-factor", "1"))
    p = Producer({"bootstrap.servers": bs, "transactional.id": "tool-tx", **COMMON})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce("txn", value=b"open", partition=0)
    assert p.flush(30) == 0

    listed = table(ok(moldau("transactions", bs, "list")))
    (row,) = [r for r in listed if r["TransactionalId"] == "tool-tx"]
    assert (row["Coordinator"], row["TransactionState"]) == ("1", "Ongoing")
    producer_id = row["ProducerId"]

    out = ok(moldau("transactions", bs, "describe", "--transactional-id", "tool-tx"))
    assert [len(line.split("\t")) for line in out.splitlines()] == [10, 10], "nine cells, each ending in a tab"
    (described,) = table(out)
    assert described["CoordinatorId"] == "1" and described["ProducerId"] == producer_id
    assert (described["TransactionState"], described["TopicPartitions"]) == ("Ongoing", "txn-0")
    assert int(described["TransactionDurationMs"]) >= 0

    (producer,) = table(ok(moldau("transactions", bs, "describe-producers", "--topic", "txn", "--partition", "0")))
    assert (producer["ProducerId"], producer["CurrentTransactionStartOffset"]) == (producer_id, "0")

    p.commit_transaction(30)
    (described,) = table(ok(moldau("transactions", bs, "describe", "--transactional-id", "tool-tx")))
    assert described["TransactionState"] == "CompleteCommit"
    assert table(ok(moldau("transactions", bs, "find-hanging", "--max-transaction-timeout", "0"))) == []
    one_line_failure(moldau("transactions", bs, "describe", "--transactional-id", "nobody"),
                     "TRANSACTIONAL_ID_NOT_FOUND")


def test_cluster_describe_standalone(broker):
    out = ok(moldau("cluster describe", broker.bootstrap))
    lines = out.splitlines()
    assert lines[1:3] == ["Controller: 1", "Brokers: 1"]
    assert fields(lines[3]) == {"Broker": "1", "Host": broker.bootstrap, "Rack": "null"}
    counts = dict(line.split(": ") for line in lines[4:])
    assert counts["UnderReplicatedPartitions"] == counts["OfflinePartitions"] == "0"
    assert int(counts["Partitions"]) == sum(len(t.partitions) for t in topics_of(broker.bootstrap).values())


def test_command_config_and_one_line_failures(broker, tmp_path):
    sasl = broker.sasl_bootstrap
    jaas = tmp_path / "admin.properties"
    jaas.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
                    "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
                    'username="admin" password="admin-secret";\n')
    librdkafka = tmp_path / "librdkafka.properties"
    librdkafka.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.username=admin\n"
                          "sasl.password=admin-secret\nrequest.timeout.ms=10000\n")
    for config in (jaas, librdkafka):
        assert "__consumer_offsets" in ok(moldau("topics", sasl, "--list", config=config)).split()
    assert ok(moldau("cluster describe", sasl, config=jaas)).startswith("Cluster ID: ")

    one_line_failure(moldau("topics", sasl, "--list"), sasl)  # no SASL: the broker closes the connection
    wrong = tmp_path / "wrong.properties"
    wrong.write_text(librdkafka.read_text().replace("admin-secret", "guess"))
    one_line_failure(moldau("topics", sasl, "--list", config=wrong), "refused the login")
    bad = tmp_path / "bad.properties"
    bad.write_text("security.protocol=CARRIER_PIGEON\n")
    one_line_failure(moldau("topics", sasl, "--list", config=bad), "security.protocol=CARRIER_PIGEON")
    one_line_failure(moldau("topics", sasl, "--list", config=tmp_path / "missing.properties"), "missing.properties")
    tools = [("topics", ["--list"]), ("consumer-groups", ["--list"]), ("configs", ["--entity-type", "topics",
             "--describe"]), ("acls", ["--list"]), ("transactions", ["list"]), ("cluster describe", [])]
    with ThreadPoolExecutor(len(tools)) as pool:  # each waits out its retries: side by side
        for result in pool.map(lambda tool: moldau(tool[0], f"127.0.0.1:{free_port()}", *tool[1]), tools):
            one_line_failure(result, "cannot reach")
    one_line_failure(moldau("topics", "no-port", "--list"), "'no-port' is not host:port")
    one_line_failure(moldau("consumer-groups", broker.bootstrap, "--describe"), "--group")
    for tool, args, named in (("topics", ["--list", "--partitions", "x"], "--partitions"),
                              ("topics", ["--list", "--bogus"], "--bogus"),
                              ("acls", ["--list", "--add"], "--add"),
                              ("transactions", ["describe"], "--transactional-id"),
                              ("cluster describe", ["--brokers-please"], "--brokers-please")):
        one_line_failure(moldau(tool, broker.bootstrap, *args), named)


def test_command_config_with_tls_and_a_client_certificate(start_broker, certs, tmp_path):
    from helpers.security import tls_listener

    b = start_broker(tls_listener(certs, client_auth="required"))
    mutual = tmp_path / "tls.properties"
    mutual.write_text(f"security.protocol=SSL\nssl.truststore.type=PEM\nssl.truststore.location={certs.ca}\n"
                      f"ssl.keystore.type=PEM\nssl.keystore.location={certs.client_pem}\n")
    librdkafka = tmp_path / "librdkafka.properties"
    librdkafka.write_text(f"security.protocol=SSL\nssl.ca.location={certs.ca}\n"
                          f"ssl.certificate.location={certs.client_cert}\nssl.key.location={certs.client_key}\n")
    for config in (mutual, librdkafka):
        assert ok(moldau("cluster describe", b.bootstrap, config=config)).startswith("Cluster ID: ")

    no_certificate = tmp_path / "no-cert.properties"
    no_certificate.write_text(f"security.protocol=SSL\nssl.truststore.location={certs.ca}\n")
    one_line_failure(moldau("topics", b.bootstrap, "--list", config=no_certificate), b.bootstrap)
    untrusted = tmp_path / "untrusted.properties"
    untrusted.write_text(f"security.protocol=SSL\nssl.truststore.location={certs.rogue_cert}\n"
                         f"ssl.keystore.location={certs.client_pem}\n")
    one_line_failure(moldau("topics", b.bootstrap, "--list", config=untrusted), "CERTIFICATE_VERIFY_FAILED")
