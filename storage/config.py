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


def _optional_int(value: str) -> int | None:
    return None if value in ("", "null", "None") else int(value)


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
}

# Kafka's defaults (4.0): no bound into the past, one hour into the future.
NO_TIMESTAMP_BOUND = 2**63 - 1
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

    def with_topic_configs(self, configs: Mapping[str, str]) -> LogConfig:
        """This config (the broker defaults) overlaid with a topic's configs.

        Topic configs the log does not use (retention.ms, cleanup.policy, ...)
        are ignored here; the catalog keeps them.
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
