"""Topic configs at run time, with confluent-kafka: AlterConfigs, IncrementalAlterConfigs,
DescribeConfigs (sources, synonyms, no nulls), and configs that are enforced, not only stored."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource, NewTopic

from helpers.kafka import admin, producer

TOPIC = ConfigResource.Type.TOPIC


def _create(a, topic: str, **configs: str) -> None:
    a.create_topics([NewTopic(topic, 1, 1, config=configs)], operation_timeout=30)[topic].result(30)


def _describe(a, topic: str) -> dict[str, ConfigEntry]:
    (future,) = a.describe_configs([ConfigResource(TOPIC, topic)]).values()
    return future.result(30)


def _incremental(a, topic: str, *entries: ConfigEntry) -> None:
    (future,) = a.incremental_alter_configs([ConfigResource(TOPIC, topic, incremental_configs=list(entries))]).values()
    future.result(30)


def _produce_error(bootstrap: str, topic: str, key: bytes | None, value: bytes, **config) -> KafkaError | None:
    p, _ = producer(bootstrap, **{"linger_ms": 0, "message_timeout_ms": 10000, "retries": 0, **config})
    errors = []
    p.produce(topic, key=key, value=value, on_delivery=lambda err, m: errors.append(err))
    p.flush(30)
    assert len(errors) == 1
    return errors[0]


def test_describe_configs_reports_sources_synonyms_and_no_nulls(start_broker):
    broker = start_broker({"log.retention.hours": 48})
    a = admin(broker.bootstrap)
    _create(a, "described", **{"retention.bytes": "5000"})
    entries = _describe(a, "described")
    assert None not in [e.value for e in entries.values()], [n for n, e in entries.items() if e.value is None]
    for name in ("delete.retention.ms", "min.cleanable.dirty.ratio", "segment.jitter.ms", "preallocate",
                 "message.timestamp.after.max.ms", "unclean.leader.election.enable", "compression.type"):
        assert name in entries
    assert entries["flush.messages"].value == str(2**63 - 1)

    retention_bytes = entries["retention.bytes"]
    assert (retention_bytes.value, retention_bytes.source) == ("5000", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
    assert not retention_bytes.is_read_only

    retention_ms = entries["retention.ms"]
    assert retention_ms.value == str(48 * 3_600_000)
    assert retention_ms.source == ConfigSource.STATIC_BROKER_CONFIG.value
    assert "log.retention.hours" in retention_ms.synonyms  # keyed by name here; the Java test checks the list
    segment_bytes = entries["segment.bytes"]
    assert (segment_bytes.value, segment_bytes.source, segment_bytes.is_read_only) == (
        "1073741824", ConfigSource.DEFAULT_CONFIG.value, False)

    # a client that reads every config back and writes it again (AlterConfigs replaces all of them)
    (future,) = a.alter_configs([ConfigResource(TOPIC, "described", set_config={
        n: e.value for n, e in entries.items()})]).values()
    future.result(30)
    assert _describe(a, "described")["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value


def test_alter_and_incremental_alter_persist_across_restart(start_broker):
    broker = start_broker()
    a = admin(broker.bootstrap)
    _create(a, "altered", **{"retention.ms": "100000"})
    (future,) = a.alter_configs([ConfigResource(TOPIC, "altered", set_config={
        "retention.bytes": "9000", "max.message.bytes": "2000"})]).values()
    future.result(30)
    entries = _describe(a, "altered")
    assert entries["retention.bytes"].value == "9000"
    assert entries["retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value  # AlterConfigs replaced it

    _incremental(a, "altered",
                 ConfigEntry("segment.bytes", "50000", incremental_operation=AlterConfigOpType.SET),
                 ConfigEntry("retention.bytes", None, incremental_operation=AlterConfigOpType.DELETE),
                 ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND))
    broker.restart()
    a = admin(broker.bootstrap)
    entries = _describe(a, "altered")
    assert entries["segment.bytes"].value == "50000"
    assert entries["retention.bytes"].source == ConfigSource.DEFAULT_CONFIG.value
    assert entries["cleanup.policy"].value == "compact,delete"
    assert entries["max.message.bytes"].value == "2000"

    _incremental(a, "altered", ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.SUBTRACT))
    assert _describe(a, "altered")["cleanup.policy"].value == "delete"


REFUSED = [
    ("no.such.config", "1"),
    ("retention.ms", "soon"),
    ("cleanup.policy", "shred"),
    ("min.cleanable.dirty.ratio", "2"),
    ("compression.type", "brotli"),  # not a codec Kafka has
    ("remote.storage.enable", "true"),
    ("segment.jitter.ms", "1000"),
    # storage.config.TOPIC_CONFIGS' checks
    ("segment.bytes", "13"),
    ("segment.ms", "0"),
    ("flush.messages", "0"),
    ("retention.ms", "-2"),
    ("message.timestamp.type", "WallClock"),
    ("min.insync.replicas", "0"),
    ("max.compaction.lag.ms", "0"),
    ("unclean.leader.election.enable", "maybe"),
]


def test_configs_that_cannot_be_honoured_are_refused(start_broker):
    broker = start_broker()
    a = admin(broker.bootstrap)
    _create(a, "strict")
    for name, value in REFUSED:
        with pytest.raises(KafkaException) as refused:
            _incremental(a, "strict", ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET))
        assert refused.value.args[0].code() == KafkaError.INVALID_CONFIG, name
        with pytest.raises(KafkaException) as refused:
            a.create_topics([NewTopic("strict2", 1, 1, config={name: value})])["strict2"].result(30)
        assert refused.value.args[0].code() == KafkaError.INVALID_CONFIG, name
    assert a.list_topics(timeout=10).topics.keys().isdisjoint({"strict2"})
    assert _describe(a, "strict")["cleanup.policy"].value == "delete"  # nothing of it was stored


def test_topic_configs_are_enforced_on_produce(start_broker):
    broker = start_broker()
    a = admin(broker.bootstrap)
    _create(a, "small", **{"max.message.bytes": "1000"})
    error = _produce_error(broker.bootstrap, "small", b"k", b"x" * 5000, compression_type="none")
    assert error is not None and error.code() == KafkaError.MSG_SIZE_TOO_LARGE
    assert _produce_error(broker.bootstrap, "small", b"k", b"x" * 500) is None

    _create(a, "compacted", **{"cleanup.policy": "compact"})
    error = _produce_error(broker.bootstrap, "compacted", None, b"keyless")
    assert error is not None and error.code() == KafkaError.INVALID_RECORD
    assert _produce_error(broker.bootstrap, "compacted", b"key", b"value") is None
    # one batch of keyed and keyless records (librdkafka's test 0011): refused whole, naming the keyless
    # ones (KIP-467), which fail INVALID_RECORD; the others fail as batch mates of an invalid record
    p, _ = producer(broker.bootstrap, linger_ms=500, retries=0, message_timeout_ms=10000)
    reports = {}
    for i in range(6):
        p.produce("compacted", key=None if i in (1, 4) else b"k%d" % i, value=b"%d" % i,
                  on_delivery=lambda err, m, i=i: reports.__setitem__(i, err))
    p.flush(30)
    assert {i: err.code() for i, err in reports.items()} == {
        i: KafkaError.INVALID_RECORD if i in (1, 4) else KafkaError._INVALID_DIFFERENT_RECORD for i in range(6)}

    _create(a, "two-replicas", **{"min.insync.replicas": "2"})
    error = _produce_error(broker.bootstrap, "two-replicas", b"k", b"v", acks="all", message_timeout_ms=3000)
    assert error is not None and error.code() == KafkaError.NOT_ENOUGH_REPLICAS
    assert _produce_error(broker.bootstrap, "two-replicas", b"k", b"v", acks=1, enable_idempotence=False) is None

    _create(a, "recent-only", **{"message.timestamp.before.max.ms": "60000"})
    p, _ = producer(broker.bootstrap, linger_ms=0, retries=0)
    errors = []
    p.produce("recent-only", key=b"k", value=b"old", timestamp=1_000_000,
              on_delivery=lambda err, m: errors.append(err))
    p.flush(30)
    assert errors[0] is not None and errors[0].code() == KafkaError.INVALID_TIMESTAMP

    # altering max.message.bytes at run time changes what the next produce may send
    _incremental(a, "small", ConfigEntry("max.message.bytes", "10000", incremental_operation=AlterConfigOpType.SET))
    assert _produce_error(broker.bootstrap, "small", b"k", b"x" * 5000, compression_type="none") is None


# ---------------------------------------------------------------------------
# Java AdminClient: incrementalAlterConfigs, alterConfigs, describeConfigs with
# types and synonyms, describeLogDirs, deleteRecords
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def java(tmp_path_factory):
    from helpers.java_clients import JavaClients

    return JavaClients.build(tmp_path_factory.mktemp("java"))  # a missing JDK or jar fails: make test-deps


def test_java_admin_alters_configs_that_persist_across_restart(start_broker, java):
    from helpers.java_clients import every, only

    broker = start_broker({"log.retention.hours": 48})
    lines = java.run(broker.bootstrap, "alterConfigs", "java-configs")
    assert only(lines, "incrementalAlterConfigsInvalid")["error"] == "InvalidConfigurationException"
    p, _ = producer(broker.bootstrap, linger_ms=0)
    for i in range(10):
        p.produce("java-configs", key=b"k%d" % i, value=b"v" * 100)
    p.flush(30)
    broker.restart()
    configs = {c["name"]: c for c in every(java.run(broker.bootstrap, "describeConfigs", "java-configs"), "config")}
    assert configs["retention.ms"] == {
        "op": "config", "name": "retention.ms", "value": "3600000", "source": "DYNAMIC_TOPIC_CONFIG",
        "type": "LONG", "readOnly": False, "synonyms": [
            {"name": "retention.ms", "value": "3600000", "source": "DYNAMIC_TOPIC_CONFIG"},
            {"name": "log.retention.hours", "value": "48", "source": "STATIC_BROKER_CONFIG"},
            {"name": "log.retention.hours", "value": "168", "source": "DEFAULT_CONFIG"},
        ]}
    assert (configs["cleanup.policy"]["value"], configs["cleanup.policy"]["type"]) == ("compact,delete", "LIST")
    assert (configs["segment.bytes"]["value"], configs["segment.bytes"]["type"]) == ("100000", "INT")
    assert configs["min.cleanable.dirty.ratio"]["type"] == "DOUBLE"
    assert configs["preallocate"]["type"] == "BOOLEAN"
    assert configs["flush.messages"]["value"] == str(2**63 - 1)
    assert not [name for name, c in configs.items() if c["value"] is None or c["type"] == "UNKNOWN" or c["readOnly"]]
    (log_dir,) = every(java.run(broker.bootstrap, "describeConfigs", "java-configs"), "logDir")
    assert log_dir["size"] == sum(f.stat().st_size for f in broker.partition_dir("java-configs", 0).glob("*.log"))
    assert log_dir["size"] > 1000 and log_dir["totalBytes"] > 0

    whole = {c["name"]: c for c in every(java.run(broker.bootstrap, "describeConfigs", "java-configs-whole"), "config")}
    assert (whole["retention.bytes"]["value"], whole["retention.bytes"]["source"]) == ("123456", "DYNAMIC_TOPIC_CONFIG")

    assert only(java.run(broker.bootstrap, "deleteRecords", "java-configs", 0, 4), "deleteRecords")["lowWatermark"] == 4


def test_create_topics_answers_with_the_topics_configs(start_broker):
    """KIP-525: CreateTopics v5+ gives each created topic's configs as DescribeConfigs would (Java's
    CreateTopicsResult.config), validate_only too."""
    from helpers.wire import WireClient

    broker = start_broker({"log.retention.hours": 48})
    for validate_only in (True, False):
        with WireClient(broker.port) as c:
            r = c.request("CreateTopics", 7, {"timeout_ms": 10000, "validate_only": validate_only, "topics": [
                {"name": "answered", "num_partitions": 2, "replication_factor": 1, "assignments": [],
                 "configs": [{"name": "cleanup.policy", "value": "compact"}]}]})
        (topic,) = r["topics"]
        assert topic["error_code"] == 0, topic
        configs = {e["name"]: (e["value"], e["config_source"], e["read_only"]) for e in topic["configs"]}
        assert configs["cleanup.policy"] == ("compact", ConfigSource.DYNAMIC_TOPIC_CONFIG.value, False)
        assert configs["retention.ms"] == (str(48 * 3_600_000), ConfigSource.STATIC_BROKER_CONFIG.value, False)
        assert configs["segment.bytes"] == ("1073741824", ConfigSource.DEFAULT_CONFIG.value, False)
