"""Java kafka-clients 3.9.0, the client under Spark's Kafka source, against a real broker.

A small Java program (tests/java/ClientConformance.java; helpers/java_clients.py
says where its jars come from and how it is compiled) runs one scenario per
process and prints what the client saw as JSON lines. These tests compare that
with what was produced — by the Java producer itself, or by confluent-kafka —
and with what the broker stored in its segment files.

Transactions run only when the broker advertises EndTxn, consumer groups only
when it advertises JoinGroup; otherwise those tests skip, saying why.
"""

from __future__ import annotations

import base64
import time
from contextlib import closing
from dataclasses import replace

import pytest
from confluent_kafka import TIMESTAMP_CREATE_TIME, ConsumerGroupTopicPartitions, TopicCollection

from helpers.groups import GROUP_BROKER
from helpers.java_clients import every, only, record_tuple
from helpers.kafka import admin, create_topic, make_messages, produce_all, read_from
from helpers.wire import WireClient, api_versions_roundtrip, connect
from protocol.frames import API_NAMES
from protocol.records import scan_batches

CODECS = {"gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}  # record batch attribute bits


def require_api(b, api: str, feature: str) -> None:
    with closing(connect(b.port)) as s:
        advertised = {API_NAMES.get(key) for key in api_versions_roundtrip(s, 1)}
    if api not in advertised:
        pytest.skip(f"the broker does not advertise {api}: {feature} not implemented yet")


def stored_batches(b, topic: str, partition: int) -> list:
    """Headers of the record batches in a partition's segment files, in order."""
    return [hdr for path in b.segment_files(topic, partition) for _, hdr in scan_batches(path.read_bytes())]


def produced_records(msgs, result) -> list[tuple]:
    """confluent-kafka messages as record tuples (see record_tuple), at their acknowledged offsets."""
    deliveries = zip(msgs, result.deliveries, strict=True)
    rows = [(d.partition, d.offset, m.key, m.value, m.headers, m.timestamp) for m, d in deliveries]
    return sorted(rows, key=lambda r: (r[0], r[1]))


def check_consume(lines: list[dict], visible: list[tuple], end: int, beginning: int = 0) -> None:
    """A `consume` run saw exactly ``visible`` from ``beginning`` to ``end``, and its seeks landed right."""
    assert only(lines, "bounds") == {"op": "bounds", "beginning": beginning, "end": end}
    records = every(lines, "record")
    assert {r["timestampType"] for r in records} <= {"CreateTime"}
    got = [record_tuple(r) for r in records]
    assert len(got) == len(visible), f"consumed {len(got)} records, expected {len(visible)}"
    differ = [(want, have) for want, have in zip(visible, got, strict=True) if want != have]
    assert not differ, f"{len(differ)} records differ from what was produced; first (expected, got): {differ[:2]}"
    after = only(lines, "afterPoll")
    assert (after["records"], after["position"]) == (len(visible), end), "position() after polling to the end"

    middle = beginning + (end - beginning) // 2
    seek = only(lines, "seek")
    assert seek["to"] == middle
    assert seek["firstOffset"] == next((r[1] for r in visible if r[1] >= middle), None), (
        f"after seek({middle}) the first record polled is {seek['firstOffset']}")
    assert only(lines, "seekToEnd")["position"] == end
    assert only(lines, "seekToBeginning")["position"] == beginning


# ---------------------------------------------------------------------------
# AdminClient
# ---------------------------------------------------------------------------


def test_java_admin_topics_and_cluster(start_broker, java):
    """createTopics, describeTopics (by name: DescribeTopicPartitions; by id: Metadata), describeCluster."""
    b = start_broker(node_id=7)
    topic = "java-admin"
    lines = java.run(b.bootstrap, "admin", topic, 3)

    assert only(lines, "createTopics")["partitions"] == 3
    assert only(lines, "createTopicsAgain")["error"] == "TopicExistsException"
    assert only(lines, "describeMissingTopic")["error"] == "UnknownTopicOrPartitionException"
    by_name = only(lines, "describeTopics")
    assert by_name["topic"] == topic and by_name["internal"] is False
    assert by_name["partitions"] == [{"partition": p, "leader": 7, "replicas": [7], "isr": [7]} for p in range(3)]
    by_id = only(lines, "describeTopicsById")
    assert {**by_id, "op": None} == {**by_name, "op": None}, "describeTopics by topic id differs from by name"

    node = {"id": 7, "host": b.host, "port": b.port}
    cluster = only(lines, "describeCluster")
    assert cluster["controller"] == node and cluster["nodes"] == [node]

    # what librdkafka is told must be the same cluster and topic
    a = admin(b.bootstrap)
    described = a.describe_topics(TopicCollection([topic]))[topic].result(10)
    # the same 16 bytes: Java prints URL-safe base64, librdkafka the standard alphabet
    assert base64.b64decode(f"{described.topic_id}==") == base64.urlsafe_b64decode(f"{by_name['topicId']}==")
    md = a.list_topics(timeout=10)
    assert (md.cluster_id, md.controller_id) == (cluster["clusterId"], 7)


def test_metadata_by_topic_id_with_empty_name(broker):
    """The Metadata v12 request the Java admin's describeTopics(topic ids) sends: each topic has its id and the name "".

    Kafka looks such topics up by id; answering for a topic named "" (a zero topic id) makes the Java
    client throw IllegalStateException("Use errors() when managing topic using topic name").
    """
    create_topic(broker.bootstrap, "by-id", partitions=2)
    body = {"allow_auto_topic_creation": False, "include_topic_authorized_operations": False}
    with WireClient(broker.port) as c:
        (by_name,) = c.request("Metadata", 12, {**body, "topics": [{"name": "by-id", "topic_id": None}]})["topics"]
        by_id_request = {**body, "topics": [{"name": "", "topic_id": by_name["topic_id"]}]}
        (by_id,) = c.request("Metadata", 12, by_id_request)["topics"]
    assert by_name["topic_id"].int != 0
    assert by_id == by_name


def test_java_list_offsets(broker, java):
    """listOffsets earliest, latest, max timestamp, and latest READ_COMMITTED: the LSO, which is the high
    watermark while no transaction is open."""
    topic = "java-offsets"
    create_topic(broker.bootstrap, topic, partitions=3)
    base = int(time.time() * 1000) - 600_000
    # round robin over partitions 0 and 1 (2 stays empty); one message in partition 0 has the newest timestamp
    msgs = [replace(m, timestamp=base + (10**6 if m.seq == 34 else m.seq)) for m in make_messages(65, 2, seed=5)]
    rows = produced_records(msgs, produce_all(broker.bootstrap, topic, msgs))

    lines = java.run(broker.bootstrap, "offsets", topic)
    got = {line["partition"]: {k: v for k, v in line.items() if k not in ("op", "partition")}
           for line in every(lines, "listOffsets")}
    want = {}
    for p in range(3):
        part = [r for r in rows if r[0] == p]
        newest = max(part, key=lambda r: r[5], default=None)  # the first of equals, as Kafka answers
        want[p] = {"earliest": 0, "latest": len(part), "latestReadCommitted": len(part),
                   "maxTimestampOffset": newest[1] if newest else -1, "maxTimestamp": newest[5] if newest else -1}
    assert got == want


# ---------------------------------------------------------------------------
# KafkaProducer (defaults: idempotent, acks=all) and KafkaConsumer
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("codec", list(CODECS))
def test_java_producer_compressed_batches(broker, java, codec):
    """Multi-record compressed batches at exact offsets, stored as sent, read back by librdkafka and by Java."""
    topic, partition, count = f"java-produce-{codec}", 1, 400
    create_topic(broker.bootstrap, topic, partitions=2)
    lines = java.run(broker.bootstrap, "produce", topic, partition, count, codec)

    sent = [record_tuple(a) for a in every(lines, "ack")]
    assert [(r[0], r[1]) for r in sent] == [(partition, i) for i in range(count)], "acknowledged offsets"
    (state,) = only(lines, "describeProducers")["producers"]
    assert (state["lastSequence"], state["currentTransactionStartOffset"]) == (count - 1, -1)

    batches = stored_batches(broker, topic, partition)
    assert sum(h.records_count for h in batches) == count
    assert {h.compression for h in batches} == {CODECS[codec]}
    assert {h.producer_id for h in batches} == {state["producerId"]}, "idempotence is the Java producer's default"
    assert [h.base_sequence for h in batches] == [h.base_offset for h in batches]
    assert max(h.records_count for h in batches) > 1, f"no multi-record batch: {[h.records_count for h in batches]}"

    got = read_from(broker.bootstrap, topic, partition, 0, count)
    assert {ts_type for *_, (ts_type, _) in got} == {TIMESTAMP_CREATE_TIME}
    assert [(partition, o, k, v, h, ts) for o, k, v, h, (_, ts) in got] == sent, "librdkafka reads other records"

    check_consume(java.run(broker.bootstrap, "consume", topic, partition, "read_uncommitted", "-"), sent, count)


@pytest.mark.parametrize("isolation", ["read_committed", "read_uncommitted"])
def test_java_consumer_assign_seek_poll(broker, java, isolation):
    """Records librdkafka produced: 100 in plain batches, then 200 in lz4 batches; seek lands mid-batch."""
    topic = "java-consume"
    create_topic(broker.bootstrap, topic, partitions=1)
    base = int(time.time() * 1000) - 600_000
    msgs = [replace(m, timestamp=base + 10 * m.seq) for m in make_messages(300, 1, seed=7)]
    plain = produce_all(broker.bootstrap, topic, msgs[:100], linger_ms=50)
    packed = produce_all(broker.bootstrap, topic, msgs[100:], linger_ms=100, compression_type="lz4")
    rows = produced_records(msgs[:100], plain) + produced_records(msgs[100:], packed)
    assert [r[1] for r in rows] == list(range(300))
    assert any(h.compression == CODECS["lz4"] and h.base_offset < 150 <= h.last_offset
               for h in stored_batches(broker, topic, 0)), "the seek to 150 should land inside an lz4 batch"

    # timestamps inside the uncompressed batches, before the first and after the last record
    queries = [base - 1000, rows[40][5] - 5, rows[99][5], rows[-1][5] + 1]
    lines = java.run(broker.bootstrap, "consume", topic, 0, isolation, ",".join(map(str, queries)))
    check_consume(lines, rows, 300)
    found = [(line["timestamp"], line["offset"], line["recordTimestamp"]) for line in every(lines, "offsetsForTimes")]
    first_at = [next((r for r in rows if r[5] >= q), None) for q in queries]
    assert found == [(q, r and r[1], r and r[5]) for q, r in zip(queries, first_at, strict=True)]


def test_java_timestamp_lookups_inside_compressed_batches(broker, java):
    """offsetsForTimes and listOffsets(maxTimestamp) name the exact record, as Kafka does."""
    topic, count = "java-times-lz4", 300
    create_topic(broker.bootstrap, topic, partitions=1)
    sent = [record_tuple(a) for a in every(java.run(broker.bootstrap, "produce", topic, 0, count, "lz4"), "ack")]
    inside = next(h for h in stored_batches(broker, topic, 0) if h.records_count > 2)
    target = sent[inside.base_offset + 1]  # the second record of a compressed batch

    newest = only(java.run(broker.bootstrap, "offsets", topic), "listOffsets")
    lookup = only(java.run(broker.bootstrap, "consume", topic, 0, "read_uncommitted", target[5]), "offsetsForTimes")
    assert ((newest["maxTimestampOffset"], newest["maxTimestamp"]), (lookup["offset"], lookup["recordTimestamp"])) == (
        (count - 1, sent[-1][5]), (target[1], target[5]))


# ---------------------------------------------------------------------------
# Transactions (when the broker advertises EndTxn)
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("outcomes", ["commit", "abort", "commit,abort,commit"])
def test_java_transactions(broker, java, outcomes):
    """The LSO holds at an open transaction; read_committed sees committed records only, read_uncommitted all."""
    require_api(broker, "EndTxn", "transactions")
    topic, count = "java-txn", 40
    create_topic(broker.bootstrap, topic, partitions=1)
    lines = java.run(broker.bootstrap, "transactions", topic, 0, count, f"java-txn-{outcomes}", outcomes)

    acks = [record_tuple(a) for a in every(lines, "ack")]
    opened, ended = every(lines, "open"), every(lines, "ended")
    start, everything, committed = 0, [], []
    for t, outcome in enumerate(outcomes.split(",")):
        records = acks[t * count:(t + 1) * count]
        assert [r[1] for r in records] == list(range(start, start + count)), f"transaction {t}: acknowledged offsets"
        assert (opened[t]["latest"], opened[t]["latestReadCommitted"]) == (start + count, start), (
            f"transaction {t} open: high watermark after its records, LSO at its first offset")
        assert [s["currentTransactionStartOffset"] for s in opened[t]["producers"]] == [start], (
            f"transaction {t} open: DescribeProducers shows where it started")
        start += count + 1  # its records and the commit or abort marker
        assert (ended[t]["latest"], ended[t]["latestReadCommitted"]) == (start, start), (
            f"transaction {t} {outcome}ed: the LSO is the high watermark again")
        everything += records
        committed += records if outcome == "commit" else []

    check_consume(java.run(broker.bootstrap, "consume", topic, 0, "read_committed", "-"), committed, start)
    check_consume(java.run(broker.bootstrap, "consume", topic, 0, "read_uncommitted", "-"), everything, start)


# ---------------------------------------------------------------------------
# Consumer group (when the broker advertises JoinGroup)
# ---------------------------------------------------------------------------


def test_java_consumer_group_resumes_from_committed_offsets(start_broker, java):
    """A member polls everything, commitSync()s chosen offsets and leaves; the next member resumes exactly there."""
    b = start_broker(GROUP_BROKER)
    require_api(b, "JoinGroup", "consumer groups")
    topic, group = "java-group", "java-group"
    create_topic(b.bootstrap, topic, partitions=3)
    msgs = make_messages(90, 3, seed=9)
    rows = produced_records(msgs, produce_all(b.bootstrap, topic, msgs))
    ends = {p: sum(1 for r in rows if r[0] == p) for p in range(3)}
    commits = {0: ends[0] // 2, 1: 0, 2: ends[2]}  # mid-partition, nothing read, everything read

    lines = java.run(b.bootstrap, "group", topic, group, ",".join(f"{p}={o}" for p, o in commits.items()))
    by_key = {str(p): o for p, o in commits.items()}
    first = only(lines, "firstMember")
    assert (first["assignment"], first["records"]) == ([0, 1, 2], len(rows))
    assert only(lines, "commitSync")["offsets"] == by_key
    assert only(lines, "committed")["offsets"] == by_key, "a new member reads the committed offsets back"

    second = only(lines, "secondMember")
    resumed = [r for r in rows if r[1] >= commits[r[0]]]
    assert second["assignment"] == [0, 1, 2]
    assert second["firstOffsets"] == {str(p): o for p, o in commits.items() if o < ends[p]}
    assert second["positions"] == {f"{topic}-{p}": end for p, end in ends.items()}
    got = sorted(record_tuple(r) for r in every(lines, "record"))
    assert got == resumed, f"second member read {len(got)} records, expected {len(resumed)} from the committed offsets"

    # and librdkafka sees the same committed offsets
    a = admin(b.bootstrap)  # kept referenced: a destroyed client never answers its futures
    listed = a.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(10)
    assert {tp.partition: tp.offset for tp in listed.topic_partitions} == commits
