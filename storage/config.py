"""Topic configs, named and defaulted as in Kafka: TOPIC_CONFIGS, the one table of them, and LogConfig, what a
log enforces (one field per enforced config, derived from the table)."""

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


def parse_cleanup_policy(value: str) -> frozenset[str]:
    """cleanup.policy: a comma-separated list of delete and compact."""
    policies = frozenset(p.strip() for p in value.split(","))
    if not policies or not policies <= {DELETE, COMPACT}:
        raise ValueError(value)
    return policies


def _never_as_none(value: str) -> int | None:
    """flush.*: Kafka's "never" (Long.MAX_VALUE, or unset) is None, leaving the flush to the OS."""
    return None if value in ("", "null", "None") or int(value) == LONG_MAX else int(value)


def _at_least(low: int) -> Callable[[object], str | None]:
    return lambda value: None if value >= low else f"must be at least {low}"


def _between(low, high) -> Callable[[object], str | None]:
    return lambda value: None if low <= value <= high else f"must be in [{low}, {high}]"


def _one_of(values: tuple[str, ...]) -> Callable[[object], str | None]:
    return lambda value: None if value in values else f"must be one of {', '.join(values)}"


# DescribeConfigs config types
BOOLEAN, STRING, INT, SHORT, LONG, DOUBLE, LIST = 1, 2, 3, 4, 5, 6, 7
_PARSE = {INT: int, LONG: int, DOUBLE: float, STRING: str}

# compression.type: the codec a leader writes every batch in; "producer" keeps the producer's
COMPRESSION_TYPES = ("uncompressed", "gzip", "snappy", "lz4", "zstd", "producer")


@dataclass(frozen=True)
class TopicConfig:
    """One topic config: everything the broker needs of it (docs/how-to-change.md, "Add a topic config").

    Enforced ones (``accepts`` None) are a LogConfig field of the same name (dots as underscores, or
    ``field``); the others are accepted only with values that change nothing on this broker. ``broker``
    is the broker setting giving the default: broker/config/broker_config.py makes it a setting of the same type, ``doc``
    and check (``dynamic``: AlterConfigs on the BROKER resource changes it at run time, as Kafka's
    DynamicLogConfig does)."""

    name: str
    type: int
    default: str  # Kafka's default, as DescribeConfigs shows it
    doc: str
    broker: str | None = None
    check: Callable[[object], str | None] | None = None  # a problem of a parsed value, as "must be ..."
    parse: Callable[[str], object] | None = None  # text -> LogConfig value (default: by type)
    field: str | None = None
    accepts: Callable[[str], bool] | None = None  # not enforced: the values that change nothing
    dynamic: bool = True
    broker_unset: bool = False  # the broker setting is unset by default (else its default is the topic's)
    more_synonyms: tuple[str, ...] = ()  # broker settings after ``broker`` that set it too (other units)

    @property
    def enforced(self) -> bool:
        return self.accepts is None

    @property
    def attribute(self) -> str:
        return self.field or self.name.replace(".", "_")

    @property
    def synonyms(self) -> tuple[str, ...]:
        """The broker settings supplying the default, most specific first (Kafka's configSynonyms)."""
        return ((self.broker,) if self.broker else ()) + self.more_synonyms

    def value(self, text: str):
        """``text`` as the LogConfig value; ValueError naming what is wrong."""
        try:
            value = (self.parse or _PARSE[self.type])(text)
        except ValueError:
            raise ValueError(f"invalid value {text!r} for {self.name}") from None
        problem = self.check(value) if self.check is not None and value is not None else None
        if problem:
            raise ValueError(f"{self.name} {problem}")
        return value

    def problem(self, text: str) -> str | None:
        """What is wrong with ``text`` as a value ("must be ..."), for the broker setting giving the default."""
        try:
            self.value(text)
        except ValueError as exc:
            return str(exc).removeprefix(f"{self.name} ")
        return None


def _only(*values: str) -> Callable[[str], bool]:
    return lambda value: value in values


def _any(value: str) -> bool:
    return True


_LONG_MAX = str(LONG_MAX)
_WEEK_MS = str(7 * 24 * 60 * 60 * 1000)

TOPIC_CONFIGS: dict[str, TopicConfig] = {c.name: c for c in [
    # enforced: a LogConfig field each
    TopicConfig("cleanup.policy", LIST, DELETE, "Old segments are deleted (delete), compacted (compact) or both.",
                "log.cleanup.policy", parse=parse_cleanup_policy),
    TopicConfig("compression.type", STRING, "producer", "The codec batches are stored in: uncompressed, gzip, "
                "snappy, lz4, zstd, or producer (as the producer sent them).", "compression.type",
                _one_of(COMPRESSION_TYPES)),
    TopicConfig("delete.retention.ms", LONG, "86400000", "How long a compacted log keeps tombstones.",
                "log.cleaner.delete.retention.ms", _at_least(0)),
    TopicConfig("file.delete.delay.ms", LONG, "60000", "How long a deleted segment's files linger as *.deleted.",
                "log.segment.delete.delay.ms", _at_least(0)),
    TopicConfig("flush.messages", LONG, _LONG_MAX, "fsync after this many messages (the default, Kafka's, leaves "
                "it to the OS).", "log.flush.interval.messages", _at_least(1), _never_as_none,
                field="flush_interval_messages"),
    TopicConfig("flush.ms", LONG, _LONG_MAX, "fsync at most this long after a write (default: the OS).",
                "log.flush.interval.ms", _at_least(0), _never_as_none, field="flush_interval_ms",
                broker_unset=True),
    TopicConfig("index.interval.bytes", INT, "4096", "Bytes between offset index entries.",
                "log.index.interval.bytes", _at_least(0)),
    TopicConfig("max.compaction.lag.ms", LONG, _LONG_MAX, "A record is compacted at most this long after.",
                "log.cleaner.max.compaction.lag.ms", _at_least(1)),
    TopicConfig("max.message.bytes", INT, "1048588", "Largest record batch accepted, as in Kafka.",
                "message.max.bytes", _at_least(0)),
    TopicConfig("message.timestamp.after.max.ms", LONG, "3600000",
                "Refuse CreateTime timestamps further than this in the future (INVALID_TIMESTAMP).",
                "log.message.timestamp.after.max.ms", _at_least(0)),
    TopicConfig("message.timestamp.before.max.ms", LONG, _LONG_MAX,
                "Refuse CreateTime timestamps further than this in the past (INVALID_TIMESTAMP).",
                "log.message.timestamp.before.max.ms", _at_least(0)),
    TopicConfig("message.timestamp.type", STRING, CREATE_TIME, "The timestamp records are stored with: "
                "CreateTime (the producer's) or LogAppendTime (the broker's clock at the append).",
                "log.message.timestamp.type", _one_of(TIMESTAMP_TYPES)),
    TopicConfig("min.cleanable.dirty.ratio", DOUBLE, "0.5", "Dirty share of a log that makes it worth cleaning.",
                "log.cleaner.min.cleanable.ratio", _between(0, 1)),
    TopicConfig("min.compaction.lag.ms", LONG, "0", "A record stays uncompacted at least this long.",
                "log.cleaner.min.compaction.lag.ms", _at_least(0)),
    TopicConfig("min.insync.replicas", INT, "1", "In-sync replicas an acks=all produce needs.",
                "min.insync.replicas", _at_least(1)),
    TopicConfig("retention.bytes", LONG, "-1", "Delete the oldest segments while a partition is larger "
                "(-1: no limit).", "log.retention.bytes"),
    TopicConfig("retention.ms", LONG, _WEEK_MS, "Delete a segment whose newest record is this old (-1: forever); "
                "wins over log.retention.minutes and log.retention.hours when set.", "log.retention.ms",
                _at_least(-1), broker_unset=True, more_synonyms=("log.retention.minutes", "log.retention.hours")),
    TopicConfig("segment.bytes", INT, str(1 << 30), "Roll a segment when it reaches this size.",
                "log.segment.bytes", _between(MIN_SEGMENT_BYTES, MAX_SEGMENT_BYTES)),
    TopicConfig("segment.ms", LONG, _WEEK_MS, "Roll a segment when it is this old.", "log.roll.ms", _at_least(1)),
    # read by the controller (broker/cluster/controller.py), not by the log
    TopicConfig("unclean.leader.election.enable", BOOLEAN, "false", "Elect an out-of-sync replica when no "
                "in-sync one is left, losing what it lacks.", "unclean.leader.election.enable",
                accepts=_only("true", "false")),
    # the codecs' levels stay their defaults
    TopicConfig("compression.gzip.level", INT, "-1", "Not supported: the codec's default.", accepts=_only("-1")),
    TopicConfig("compression.lz4.level", INT, "9", "Not supported: the codec's default.", accepts=_only("9")),
    TopicConfig("compression.zstd.level", INT, "3", "Not supported: the codec's default.", accepts=_only("3")),
    # replication throttles: no replica is ever throttled
    TopicConfig("follower.replication.throttled.replicas", LIST, "", "Not supported: no replica is throttled.",
                accepts=_only("")),
    TopicConfig("leader.replication.throttled.replicas", LIST, "", "Not supported: no replica is throttled.",
                accepts=_only("")),
    # tiered storage: not supported
    TopicConfig("local.retention.bytes", LONG, "-2", "Not supported: no tiered storage.", accepts=_only("-2")),
    TopicConfig("local.retention.ms", LONG, "-2", "Not supported: no tiered storage.", accepts=_only("-2")),
    TopicConfig("remote.storage.enable", BOOLEAN, "false", "Not supported: no tiered storage.",
                accepts=_only("false")),
    TopicConfig("remote.log.copy.disable", BOOLEAN, "false", "Not supported: no tiered storage.",
                accepts=_only("false")),
    TopicConfig("remote.log.delete.on.disable", BOOLEAN, "false", "Not supported: no tiered storage.",
                accepts=_only("false")),
    # Fetch v4+ only: every reader takes the v2 format, nothing is ever down-converted
    TopicConfig("message.downconversion.enable", BOOLEAN, "true", "Nothing is down-converted: readers take v2.",
                accepts=_only("true", "false")),
    # ignored by Kafka itself since 3.0 (the format is always v2)
    TopicConfig("message.format.version", STRING, "3.0-IV1", "Ignored, as by Kafka since 3.0.", accepts=_any),
    TopicConfig("message.timestamp.difference.max.ms", LONG, _LONG_MAX,
                "Not supported: message.timestamp.before.max.ms and after.max.ms replace it.",
                accepts=_only(_LONG_MAX)),
    TopicConfig("preallocate", BOOLEAN, "false", "Not supported: segments grow as written.", accepts=_only("false")),
    TopicConfig("segment.index.bytes", INT, "10485760", "Not supported: indexes grow as written.",
                accepts=_only("10485760")),
    TopicConfig("segment.jitter.ms", LONG, "0", "Not supported: segments roll at segment.ms.", accepts=_only("0")),
]}
_ENFORCED = [c for c in TOPIC_CONFIGS.values() if c.enforced]
# the topic configs a LogConfig carries (and the broker enforces)
LOG_CONFIG_NAMES = frozenset(c.name for c in _ENFORCED)

class _LogConfigRules:
    """LogConfig's rules; its fields are TOPIC_CONFIGS' enforced configs (below)."""

    def __post_init__(self) -> None:
        for config in _ENFORCED:
            value = getattr(self, config.attribute)
            problem = config.check(value) if config.check is not None and value is not None else None
            if problem:
                raise InvalidConfig(f"{config.name} {problem}")
        if self.min_compaction_lag_ms > self.max_compaction_lag_ms:
            raise InvalidConfig("min.compaction.lag.ms must not exceed max.compaction.lag.ms")

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
        value = getattr(self, TOPIC_CONFIGS[name].attribute)
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
            if name in LOG_CONFIG_NAMES:
                config = TOPIC_CONFIGS[name]
                try:
                    changes[config.attribute] = config.value(value)
                except ValueError as exc:
                    raise InvalidConfig(str(exc)) from None
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_broker_properties(cls, properties: Mapping[str, str]) -> LogConfig:
        """Broker defaults from server.properties names (log.segment.bytes, ...)."""
        topic_names = {config.broker: config.name for config in _ENFORCED}
        return cls().with_topic_configs(
            {topic_names[key]: value for key, value in properties.items() if key in topic_names}
        )


# LogConfig: one field per enforced topic config, its default Kafka's (flush.*: None, left to the OS)
LogConfig = dataclasses.make_dataclass(
    "LogConfig", [(c.attribute, object, dataclasses.field(default=c.value(c.default))) for c in _ENFORCED],
    bases=(_LogConfigRules,), frozen=True, namespace={"__module__": __name__})
