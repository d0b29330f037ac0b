"""The one table of topic configs (storage.config.TOPIC_CONFIGS) seen through confluent-kafka: DescribeConfigs
lists every config of the table with its default, source and broker synonyms (test_topic_configs.py: values
its checks refuse are INVALID_CONFIG); a broker started with a
topic config's broker setting (log.message.timestamp.type, log.segment.bytes, ...) gives topics that
default, described as STATIC_BROKER_CONFIG and enforced on produce."""

from __future__ import annotations

import time

from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource, NewTopic

from broker.config.broker_config import SETTINGS
from helpers.kafka import admin, producer, read_from
from storage.config import TOPIC_CONFIGS

TOPIC = ConfigResource.Type.TOPIC
DEFAULT, STATIC = ConfigSource.DEFAULT_CONFIG.value, ConfigSource.STATIC_BROKER_CONFIG.value
_BROKER_DEFAULTS = {s.name: s.default for s in SETTINGS}


def _describe(a, topic: str) -> dict[str, ConfigEntry]:
    (future,) = a.describe_configs([ConfigResource(TOPIC, topic)]).values()
    return future.result(30)


def _create(a, topic: str, **configs: str) -> None:
    a.create_topics([NewTopic(topic, 1, 1, config=configs)], operation_timeout=30)[topic].result(30)


def test_describe_configs_lists_every_config_of_the_table_with_its_default_and_synonyms(start_broker):
    broker = start_broker()
    a = admin(broker.bootstrap)
    _create(a, "table")
    entries = _describe(a, "table")
    assert set(entries) == set(TOPIC_CONFIGS)
    for name, config in TOPIC_CONFIGS.items():
        entry = entries[name]
        assert (entry.value, entry.source, entry.is_read_only) == (config.default, DEFAULT, False), name
        # the broker settings that have a default, most specific first; else the topic config's own default
        expected = [s for s in config.synonyms if _BROKER_DEFAULTS.get(s) is not None] or [name]
        assert list(entry.synonyms) == expected, name
        assert all(s.source == DEFAULT for s in entry.synonyms.values()), name
    # Kafka's defaults and synonyms, as its docs give them
    assert entries["segment.bytes"].value == "1073741824"
    assert list(entries["segment.bytes"].synonyms) == ["log.segment.bytes"]
    assert entries["retention.ms"].value == "604800000"
    assert list(entries["retention.ms"].synonyms) == ["log.retention.hours"]
    assert (entries["message.timestamp.type"].value, list(entries["message.timestamp.type"].synonyms)) == (
        "CreateTime", ["log.message.timestamp.type"])
    assert list(entries["max.message.bytes"].synonyms) == ["message.max.bytes"]

    # the broker setting is dynamic, as in Kafka: changing it changes every topic's default
    (future,) = a.incremental_alter_configs([ConfigResource(ConfigResource.Type.BROKER, "1", incremental_configs=[
        ConfigEntry("log.message.timestamp.type", "LogAppendTime", incremental_operation=AlterConfigOpType.SET)])]
    ).values()
    future.result(30)
    entry = _describe(a, "table")["message.timestamp.type"]
    assert (entry.value, entry.source) == ("LogAppendTime", ConfigSource.DYNAMIC_BROKER_CONFIG.value)


def test_a_broker_setting_gives_its_topic_config_default(start_broker):
    broker = start_broker({"log.message.timestamp.type": "LogAppendTime", "log.segment.bytes": 1_048_576,
                           "log.cleanup.policy": "compact,delete"})
    a = admin(broker.bootstrap)
    _create(a, "follows")
    entries = _describe(a, "follows")
    for name, value, setting in [("message.timestamp.type", "LogAppendTime", "log.message.timestamp.type"),
                                 ("segment.bytes", "1048576", "log.segment.bytes"),
                                 ("cleanup.policy", "compact,delete", "log.cleanup.policy")]:
        assert (entries[name].value, entries[name].source) == (value, STATIC), name
        assert setting in entries[name].synonyms  # keyed by name: the STATIC and DEFAULT entries are one here
    assert entries["segment.ms"].source == DEFAULT

    p, errors = producer(broker.bootstrap, linger_ms=0)
    before = int(time.time() * 1000)
    p.produce("follows", key=b"k", value=b"v", partition=0, timestamp=1_000)  # a CreateTime from 1970
    assert p.flush(30) == 0 and errors == []
    (got,) = read_from(broker.bootstrap, "follows", 0, 0, 1)
    ts_type, ts = got[4]
    assert ts_type == TIMESTAMP_LOG_APPEND_TIME and ts >= before, got
