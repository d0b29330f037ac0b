"""The table of topic configs (storage.config.TOPIC_CONFIGS) in process: the broker's defaults and LogConfig's
agree, each broker setting it makes is checked as its topic config, and gives that config's default."""

import dataclasses

import pytest

from broker.config.broker_config import broker_log_config
from broker.config.broker_config import BrokerConfig, ConfigError
from broker.config.dynamic_configs import LOG_DEFAULTS, setting_type
from storage.config import LIST, LOG_CONFIG_NAMES, LONG, TOPIC_CONFIGS, LogConfig


def test_the_broker_defaults_are_the_topic_defaults():
    assert broker_log_config(BrokerConfig()) == LogConfig()
    assert {f.name for f in dataclasses.fields(LogConfig)} == {TOPIC_CONFIGS[n].attribute for n in LOG_CONFIG_NAMES}
    assert LOG_DEFAULTS <= BrokerConfig().values.keys()


@pytest.mark.parametrize("setting,value,problem", [
    ("log.message.timestamp.type", "WallClock", "must be one of CreateTime, LogAppendTime"),
    ("compression.type", "brotli", "must be one of"),
    ("log.cleanup.policy", "shred", "invalid value 'shred' for cleanup.policy"),
    ("log.segment.bytes", "13", "must be in [14, 2147483647]"),
    ("log.message.timestamp.after.max.ms", "-1", "must be at least 0"),
])
def test_a_broker_setting_is_checked_as_its_topic_config(setting, value, problem):
    with pytest.raises(ConfigError) as refused:
        BrokerConfig({setting: value})
    assert str(refused.value).startswith(f"{setting}: ") and problem in str(refused.value)


def test_a_broker_setting_gives_its_topic_config_default():
    config = broker_log_config(BrokerConfig({"log.message.timestamp.type": "LogAppendTime",
                                             "log.cleanup.policy": "compact", "log.retention.minutes": "5"}))
    assert config.log_append_time and config.compact and not config.delete
    assert config.retention_ms == 300_000
    assert (setting_type("log.retention.bytes"), setting_type("log.cleanup.policy")) == (LONG, LIST)  # Kafka's
