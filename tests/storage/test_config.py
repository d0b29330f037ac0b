import pytest

from storage.config import LogConfig
from storage.errors import InvalidConfig


def test_defaults_follow_kafka():
    config = LogConfig()
    assert config.segment_bytes == 1024**3
    assert config.segment_ms == 7 * 24 * 3600 * 1000
    assert config.flush_interval_messages is None
    assert config.flush_interval_ms is None
    assert config.index_interval_bytes == 4096
    assert config.message_timestamp_type == "CreateTime"
    assert not config.log_append_time


def test_topic_configs_overlay_broker_defaults():
    defaults = LogConfig(segment_bytes=10_000, flush_interval_ms=500)
    config = defaults.with_topic_configs(
        {
            "segment.bytes": "2048",
            "segment.ms": "60000",
            "flush.messages": "7",
            "message.timestamp.type": "LogAppendTime",
            "retention.ms": "1000",
            "cleanup.policy": "compact,delete",
            "compression.type": "producer",  # not the log's business; kept by the catalog
        }
    )
    assert config.segment_bytes == 2048
    assert config.segment_ms == 60_000
    assert config.flush_interval_messages == 7
    assert config.flush_interval_ms == 500  # inherited
    assert config.log_append_time
    assert config.retention_ms == 1000
    assert config.compact and config.delete
    assert defaults.segment_bytes == 10_000  # the defaults are not changed


def test_broker_properties_use_log_prefixed_names():
    config = LogConfig.from_broker_properties(
        {"log.segment.bytes": "4096", "log.roll.ms": "1000", "log.flush.interval.ms": "250", "num.partitions": "3"}
    )
    assert (config.segment_bytes, config.segment_ms, config.flush_interval_ms) == (4096, 1000, 250)


@pytest.mark.parametrize(
    "configs",
    [
        {"segment.bytes": "lots"},
        {"segment.bytes": "0"},
        {"segment.bytes": str(2**31)},
        {"segment.ms": "0"},
        {"flush.messages": "0"},
        {"index.interval.bytes": "-1"},
        {"message.timestamp.type": "WallClock"},
        {"retention.ms": "-2"},
        {"cleanup.policy": "shred"},
        {"min.cleanable.dirty.ratio": "1.5"},
        {"max.compaction.lag.ms": "0"},
    ],
)
def test_invalid_values_are_rejected(configs):
    with pytest.raises(InvalidConfig):
        LogConfig().with_topic_configs(configs)
