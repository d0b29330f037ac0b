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
}


@dataclass(frozen=True)
class LogConfig:
    segment_bytes: int = 1 << 30  # log.segment.bytes / segment.bytes
    segment_ms: int = 7 * 24 * 60 * 60 * 1000  # log.roll.ms / segment.ms
    flush_interval_messages: int | None = None  # None: leave it to the OS
    flush_interval_ms: int | None = None
    index_interval_bytes: int = 4096
    message_timestamp_type: str = CREATE_TIME

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

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == LOG_APPEND_TIME

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
