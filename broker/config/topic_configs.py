"""Topic-level configs: checking them (CreateTopics, AlterConfigs) and changing a topic's.

Their table, storage.config.TOPIC_CONFIGS, has every name Kafka has, its type, default, broker
synonym and what Moldau accepts. The configs a LogConfig carries (storage.config.LOG_CONFIG_NAMES) are
enforced and take any value Kafka takes. The others are accepted only with
values that change nothing on this broker (Kafka's default, or values whose
effect cannot arise here); anything else is refused with INVALID_CONFIG, so a
config that is stored is never a config that is ignored.
"""

from __future__ import annotations

import logging

from broker.cluster.metadata import TopicChangeInProgress
from broker.config import dynamic_configs
from broker.errors import ErrorCode
from storage.config import LOG_CONFIG_NAMES, TOPIC_CONFIGS, LogConfig
from storage.errors import InvalidConfig, UnknownTopic

log = logging.getLogger("moldau.topic_configs")


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


# AlterConfigs resource types
TOPIC_RESOURCE, BROKER_RESOURCE = 2, 4


async def alter(broker, resource_type: int, name: str, configs, validate_only: bool) -> tuple[int, str | None]:
    """Replace a topic's configs with ``configs(its current configs, the LogConfig they make)`` (or refuse,
    when that returns an error message), through the metadata store: in a cluster the topic's etcd key,
    which every broker applies. For the broker resource ``configs`` is ({name: (operation, value)}, whether
    they replace all dynamic ones). Returns (error code, message)."""
    if resource_type == BROKER_RESOURCE:
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
