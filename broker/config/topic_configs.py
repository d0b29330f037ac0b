"""Topic-level configs: every name Kafka has, its type, its broker synonyms, and what Moldau accepts.

The configs a LogConfig carries (storage.config.LOG_CONFIG_NAMES) are
enforced and take any value Kafka takes. The others are accepted only with
values that change nothing on this broker (Kafka's default, or values whose
effect cannot arise here); anything else is refused with INVALID_CONFIG, so a
config that is stored is never a config that is ignored.
"""

from __future__ import annotations

import logging
from typing import Callable, NamedTuple

from broker.cluster.metadata import TopicChangeInProgress
from broker.errors import ErrorCode
from storage.config import LOG_CONFIG_NAMES, LONG_MAX, LogConfig
from storage.errors import InvalidConfig, UnknownTopic

log = logging.getLogger("moldau.topic_configs")

# DescribeConfigs config types
BOOLEAN, STRING, INT, SHORT, LONG, DOUBLE, LIST = 1, 2, 3, 4, 5, 6, 7


class TopicConfig(NamedTuple):
    name: str
    type: int
    synonyms: tuple[str, ...]  # broker settings supplying the default, most specific first
    default: str  # Kafka's default where no broker setting of Moldau's supplies it
    accepts: Callable[[str], bool] | None = None  # for configs not enforced: values that change nothing


def _only(*values: str) -> Callable[[str], bool]:
    return lambda value: value in values


def _any(value: str) -> bool:
    return True


_LONG_MAX = str(LONG_MAX)

TOPIC_CONFIGS = {
    c.name: c
    for c in [
        # enforced
        TopicConfig("cleanup.policy", LIST, ("log.cleanup.policy",), "delete"),
        TopicConfig("delete.retention.ms", LONG, ("log.cleaner.delete.retention.ms",), "86400000"),
        TopicConfig("file.delete.delay.ms", LONG, ("log.segment.delete.delay.ms",), "60000"),
        TopicConfig("flush.messages", LONG, ("log.flush.interval.messages",), _LONG_MAX),
        TopicConfig("flush.ms", LONG, ("log.flush.interval.ms",), _LONG_MAX),
        TopicConfig("index.interval.bytes", INT, ("log.index.interval.bytes",), "4096"),
        TopicConfig("max.compaction.lag.ms", LONG, ("log.cleaner.max.compaction.lag.ms",), _LONG_MAX),
        TopicConfig("max.message.bytes", INT, ("message.max.bytes",), "1048588"),
        TopicConfig("message.timestamp.after.max.ms", LONG, ("log.message.timestamp.after.max.ms",), "3600000"),
        TopicConfig("message.timestamp.before.max.ms", LONG, ("log.message.timestamp.before.max.ms",), _LONG_MAX),
        TopicConfig("message.timestamp.type", STRING, (), "CreateTime"),
        TopicConfig("min.cleanable.dirty.ratio", DOUBLE, ("log.cleaner.min.cleanable.ratio",), "0.5"),
        TopicConfig("min.compaction.lag.ms", LONG, ("log.cleaner.min.compaction.lag.ms",), "0"),
        TopicConfig("min.insync.replicas", INT, ("min.insync.replicas",), "1"),
        TopicConfig("retention.bytes", LONG, ("log.retention.bytes",), "-1"),
        TopicConfig("retention.ms", LONG, ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
                    "604800000"),
        TopicConfig("segment.bytes", INT, ("log.segment.bytes",), "1073741824"),
        TopicConfig("segment.ms", LONG, ("log.roll.ms",), "604800000"),
        # a leader recompresses batches to it (produce.py); the levels stay the codecs' defaults
        TopicConfig("compression.type", STRING, ("compression.type",), "producer"),
        TopicConfig("compression.gzip.level", INT, (), "-1", _only("-1")),
        TopicConfig("compression.lz4.level", INT, (), "9", _only("9")),
        TopicConfig("compression.zstd.level", INT, (), "3", _only("3")),
        # replication throttles: nothing to throttle on one broker
        TopicConfig("follower.replication.throttled.replicas", LIST, (), "", _only("")),
        TopicConfig("leader.replication.throttled.replicas", LIST, (), "", _only("")),
        # tiered storage: not supported
        TopicConfig("local.retention.bytes", LONG, (), "-2", _only("-2")),
        TopicConfig("local.retention.ms", LONG, (), "-2", _only("-2")),
        TopicConfig("remote.storage.enable", BOOLEAN, (), "false", _only("false")),
        TopicConfig("remote.log.copy.disable", BOOLEAN, (), "false", _only("false")),
        TopicConfig("remote.log.delete.on.disable", BOOLEAN, (), "false", _only("false")),
        # Fetch v4+ only: every reader takes the v2 format, nothing is ever down-converted
        TopicConfig("message.downconversion.enable", BOOLEAN, (), "true", _only("true", "false")),
        # ignored by Kafka itself since 3.0 (the format is always v2)
        TopicConfig("message.format.version", STRING, (), "3.0-IV1", _any),
        TopicConfig("message.timestamp.difference.max.ms", LONG, (), _LONG_MAX, _only(_LONG_MAX)),
        TopicConfig("preallocate", BOOLEAN, (), "false", _only("false")),
        TopicConfig("segment.index.bytes", INT, (), "10485760", _only("10485760")),
        TopicConfig("segment.jitter.ms", LONG, (), "0", _only("0")),
        # read by the controller (broker/cluster/controller.py), not by the log
        TopicConfig("unclean.leader.election.enable", BOOLEAN, ("unclean.leader.election.enable",), "false",
                    _only("true", "false")),
    ]
}
assert {n for n, c in TOPIC_CONFIGS.items() if c.accepts is None} == LOG_CONFIG_NAMES


def validate(configs: dict[str, str | None], defaults: LogConfig | None = None) -> str | None:
    """An error message for the first config Kafka would refuse or Moldau cannot honour, else None."""
    for name, value in configs.items():
        config = TOPIC_CONFIGS.get(name)
        if config is None:
            return f"unknown topic config {name}"
        if value is None:
            return f"null value for {name}"
        if config.accepts is not None and not config.accepts(value):
            return f"{name}={value} is not supported by Moldau (accepted: {config.default})"
    try:
        (defaults or LogConfig()).with_topic_configs({n: v for n, v in configs.items() if n in LOG_CONFIG_NAMES})
    except InvalidConfig as exc:
        return str(exc)
    return None


def config_list(value: str | None) -> list[str]:
    """A LIST config's items."""
    return [item.strip() for item in (value or "").split(",") if item.strip()]


# IncrementalAlterConfigs operations
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


def list_changed(items: list[str], operation: int, value: str | None) -> str:
    """A LIST config's value after APPEND or SUBTRACT of ``value``'s items."""
    given = config_list(value)
    if operation == APPEND:
        return ",".join(items + [item for item in given if item not in items])
    return ",".join(item for item in items if item not in given)


# AlterConfigs resource types
TOPIC_RESOURCE, BROKER_RESOURCE = 2, 4


async def alter(broker, resource_type: int, name: str, configs, validate_only: bool) -> tuple[int, str | None]:
    """Replace a topic's configs with ``configs(its current configs, the LogConfig they make)`` (or refuse,
    when that returns an error message), through the metadata store: in a cluster the topic's etcd key,
    which every broker applies. For the broker resource ``configs`` is ({name: (operation, value)}, whether
    they replace all dynamic ones). Returns (error code, message)."""
    if resource_type == BROKER_RESOURCE:
        from broker.config import dynamic_configs

        return await dynamic_configs.alter(broker, name, *configs, validate_only)
    if resource_type != TOPIC_RESOURCE:
        return ErrorCode.INVALID_REQUEST, f"resource type {resource_type} is not supported"
    before = {}

    def change(current: dict[str, str]) -> dict[str, str]:
        before.update(current)
        wanted = configs(dict(current), broker.logs.default_config.with_topic_configs(current))
        problem = wanted if isinstance(wanted, str) else validate(wanted, broker.logs.default_config)
        if problem:
            raise InvalidConfig(problem)
        return wanted

    try:
        after = await broker.store.alter_topic_configs(name, change, validate_only)
    except UnknownTopic:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"unknown topic {name}"
    except InvalidConfig as exc:
        return ErrorCode.INVALID_CONFIG, str(exc)
    except TopicChangeInProgress as exc:  # retriable: another write of the topic went first
        return ErrorCode.REQUEST_TIMED_OUT, str(exc)
    if not validate_only:
        log.info("topic %s configs changed from %s to %s", name, before or "default",
                 after or "default")
    return ErrorCode.NONE, None
