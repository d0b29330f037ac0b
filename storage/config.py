"""Per-log configuration, named and defaulted as in Kafka."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable, Mapping

from storage.errors import InvalidConfig

CREATE_TIME = "CreateTime"
LOG_APPEND_TIME = "LogAppendTime"
TIMESTAMP_TYPES = (CREATE_TIME, LOG_APPEND_TIME)

# Positions in the offset index are 32-bit, and Kafka's segment.bytes is an int.
MAX_SEGMENT_BYTES = 2**31 - 1
# Kafka's lower bound for segment.bytes (the legacy record overhead).
MIN_SEGMENT_BYTES = 14
# Java's Long.MAX_VALUE: Kafka's "never" for lags and intervals
LONG_MAX = 2**63 - 1

DELETE = "delete"
COMPACT = "compact"


def _optional_int(value: str) -> int | None:
    return None if value in ("", "null", "None") else int(value)


def parse_cleanup_policy(value: str) -> frozenset[str]:
    """cleanup.policy: a comma-separated list of delete and compact."""
    policies = frozenset(p.strip() for p in value.split(","))
    if not policies or not policies <= {DELETE, COMPACT}:
        raise ValueError(value)
    return policies


@dataclass(frozen=True)
class _Setting:
    field: str
    broker_name: str
    parse: Callable[[str], object]


# Topic-level config name -> LogConfig field and the broker default's name.
_SETTINGS = {
    "segment.bytes": _Setting("segment_bytes", "log.segment.bytes", int),
    "segment.ms": _Setting("segment_ms", "log.roll.ms", int),
    "flush.messages": _Setting("flush_interval_messages", "log.flush.interval.messages", _optional_int),
    "flush.ms": _Setting("flush_interval_ms", "log.flush.interval.ms", _optional_int),
    "index.interval.bytes": _Setting("index_interval_bytes", "log.index.interval.bytes", int),
    "message.timestamp.type": _Setting("message_timestamp_type", "log.message.timestamp.type", str),
    "message.timestamp.before.max.ms": _Setting(
        "message_timestamp_before_max_ms", "log.message.timestamp.before.max.ms", int
    ),
    "message.timestamp.after.max.ms": _Setting(
        "message_timestamp_after_max_ms", "log.message.timestamp.after.max.ms", int
    ),
    "retention.ms": _Setting("retention_ms", "log.retention.ms", int),
    "retention.bytes": _Setting("retention_bytes", "log.retention.bytes", int),
    "file.delete.delay.ms": _Setting("file_delete_delay_ms", "log.segment.delete.delay.ms", int),
    "cleanup.policy": _Setting("cleanup_policy", "log.cleanup.policy", parse_cleanup_policy),
    "delete.retention.ms": _Setting("delete_retention_ms", "log.cleaner.delete.retention.ms", int),
    "min.cleanable.dirty.ratio": _Setting("min_cleanable_dirty_ratio", "log.cleaner.min.cleanable.ratio", float),
    "min.compaction.lag.ms": _Setting("min_compaction_lag_ms", "log.cleaner.min.compaction.lag.ms", int),
    "max.compaction.lag.ms": _Setting("max_compaction_lag_ms", "log.cleaner.max.compaction.lag.ms", int),
    "max.message.bytes": _Setting("max_message_bytes", "message.max.bytes", int),
    "min.insync.replicas": _Setting("min_insync_replicas", "min.insync.replicas", int),
    "compression.type": _Setting("compression_type", "compression.type", str),
}
# the topic configs a LogConfig carries (and the broker enforces)
LOG_CONFIG_NAMES = frozenset(_SETTINGS)

# compression.type: the codec a leader writes every batch in; "producer" keeps the producer's
COMPRESSION_TYPES = ("uncompressed", "gzip", "snappy", "lz4", "zstd", "producer")

# Kafka's defaults (4.0): no bound into the past, one hour into the future.
NO_TIMESTAMP_BOUND = LONG_MAX
DEFAULT_TIMESTAMP_AFTER_MAX_MS = 3_600_000


@dataclass(frozen=True)
class LogConfig:
    segment_bytes: int = 1 << 30  # log.segment.bytes / segment.bytes
    segment_ms: int = 7 * 24 * 60 * 60 * 1000  # log.roll.ms / segment.ms
    flush_interval_messages: int | None = None  # None: leave it to the OS
    flush_interval_ms: int | None = None
    index_interval_bytes: int = 4096
    message_timestamp_type: str = CREATE_TIME
    # CreateTime timestamps further than this from the broker's clock are refused (INVALID_TIMESTAMP)
    message_timestamp_before_max_ms: int = NO_TIMESTAMP_BOUND
    message_timestamp_after_max_ms: int = DEFAULT_TIMESTAMP_AFTER_MAX_MS
    retention_ms: int = 7 * 24 * 60 * 60 * 1000  # -1: keep forever
    retention_bytes: int = -1  # per partition; -1: no limit
    file_delete_delay_ms: int = 60_000  # how long a deleted segment's files linger as .deleted
    cleanup_policy: frozenset[str] = frozenset({DELETE})
    delete_retention_ms: int = 24 * 60 * 60 * 1000  # how long the cleaner keeps tombstones
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    max_message_bytes: int = 1048588
    min_insync_replicas: int = 1
    compression_type: str = "producer"

    def __post_init__(self) -> None:
        if not MIN_SEGMENT_BYTES <= self.segment_bytes <= MAX_SEGMENT_BYTES:
            raise InvalidConfig(f"segment.bytes must be in [{MIN_SEGMENT_BYTES}, {MAX_SEGMENT_BYTES}]")
        if self.segment_ms < 1:
            raise InvalidConfig("segment.ms must be at least 1")
        if self.flush_interval_messages is not None and self.flush_interval_messages < 1:
            raise InvalidConfig("flush.messages must be at least 1")
        if self.flush_interval_ms is not None and self.flush_interval_ms < 0:
            raise InvalidConfig("flush.ms must not be negative")
        if self.index_interval_bytes < 0:
            raise InvalidConfig("index.interval.bytes must not be negative")
        if self.message_timestamp_type not in TIMESTAMP_TYPES:
            raise InvalidConfig(f"message.timestamp.type must be one of {', '.join(TIMESTAMP_TYPES)}")
        if self.message_timestamp_before_max_ms < 0 or self.message_timestamp_after_max_ms < 0:
            raise InvalidConfig("message.timestamp.before.max.ms and after.max.ms must not be negative")
        if self.retention_ms < -1:
            raise InvalidConfig("retention.ms must be -1 (no limit) or more")
        if self.file_delete_delay_ms < 0 or self.delete_retention_ms < 0 or self.min_compaction_lag_ms < 0:
            raise InvalidConfig("file.delete.delay.ms, delete.retention.ms and min.compaction.lag.ms must not be negative")
        if self.max_compaction_lag_ms < 1:
            raise InvalidConfig("max.compaction.lag.ms must be at least 1")
        if not 0 <= self.min_cleanable_dirty_ratio <= 1:
            raise InvalidConfig("min.cleanable.dirty.ratio must be in [0, 1]")
        if self.max_message_bytes < 0:
            raise InvalidConfig("max.message.bytes must not be negative")
        if self.min_insync_replicas < 1:
            raise InvalidConfig("min.insync.replicas must be at least 1")
        if self.min_compaction_lag_ms > self.max_compaction_lag_ms:
            raise InvalidConfig("min.compaction.lag.ms must not exceed max.compaction.lag.ms")
        if self.compression_type not in COMPRESSION_TYPES:
            raise InvalidConfig(f"compression.type must be one of {', '.join(COMPRESSION_TYPES)}")

    @property
    def delete(self) -> bool:
        """Old segments are removed by retention.ms / retention.bytes."""
        return DELETE in self.cleanup_policy

    @property
    def compact(self) -> bool:
        """The log cleaner keeps the latest record per key."""
        return COMPACT in self.cleanup_policy

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == LOG_APPEND_TIME

    def timestamp_out_of_range(self, timestamp: int, now_ms: int) -> str | None:
        """Why Kafka would refuse a CreateTime ``timestamp`` at ``now_ms``; None if it is accepted."""
        if self.log_append_time or timestamp < 0:  # -1: no timestamp
            return None
        if timestamp < now_ms - self.message_timestamp_before_max_ms:
            return f"timestamp {timestamp} is more than message.timestamp.before.max.ms before the broker's {now_ms}"
        if timestamp > now_ms + self.message_timestamp_after_max_ms:
            return f"timestamp {timestamp} is more than message.timestamp.after.max.ms after the broker's {now_ms}"
        return None

    def topic_value(self, name: str) -> str:
        """Topic config ``name`` as Kafka shows it (DescribeConfigs)."""
        value = getattr(self, _SETTINGS[name].field)
        if value is None:
            return str(LONG_MAX)  # flush.messages / flush.ms left to the OS: Kafka's "never"
        if isinstance(value, frozenset):
            return ",".join(sorted(value))
        return str(value)

    def with_topic_configs(self, configs: Mapping[str, str]) -> LogConfig:
        """This config (the broker defaults) overlaid with a topic's configs.

        Topic configs the log does not use (compression.gzip.level, ...) are
        ignored here; the catalog keeps them.
        """
        changes = {}
        for name, value in configs.items():
            setting = _SETTINGS.get(name)
            if setting is None:
                continue
            try:
                changes[setting.field] = setting.parse(value)
            except ValueError:
                raise InvalidConfig(f"invalid value {value!r} for {name}") from None
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_broker_properties(cls, properties: Mapping[str, str]) -> LogConfig:
        """Broker defaults from server.properties names (log.segment.bytes, ...)."""
        topic_names = {setting.broker_name: name for name, setting in _SETTINGS.items()}
        return cls().with_topic_configs(
            {topic_names[key]: value for key, value in properties.items() if key in topic_names}
        )
