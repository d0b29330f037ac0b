"""Topic-level configs: the names Kafka accepts, and their effective values."""

from __future__ import annotations

# topic config -> broker setting that supplies its default (None: fixed default below)
_FROM_BROKER = {
    "segment.bytes": "log.segment.bytes",
    "segment.ms": "log.roll.ms",
    "flush.messages": "log.flush.interval.messages",
    "flush.ms": "log.flush.interval.ms",
    "max.message.bytes": "message.max.bytes",
    "message.timestamp.before.max.ms": "log.message.timestamp.before.max.ms",
    "message.timestamp.after.max.ms": "log.message.timestamp.after.max.ms",
}
_FIXED_DEFAULTS = {
    "cleanup.policy": "delete",
    "compression.type": "producer",
    "message.timestamp.type": "CreateTime",
    "retention.ms": "604800000",
    "retention.bytes": "-1",
    "min.insync.replicas": "1",
    "unclean.leader.election.enable": "false",
    "min.compaction.lag.ms": "0",
}
_CHOICES = {
    "cleanup.policy": {"delete", "compact", "compact,delete", "delete,compact"},
    "message.timestamp.type": {"CreateTime", "LogAppendTime"},
    "compression.type": {"producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"},
}
TOPIC_CONFIG_NAMES = frozenset(_FROM_BROKER) | frozenset(_FIXED_DEFAULTS)


def validate(configs: dict[str, str | None]) -> str | None:
    """An error message for the first config Kafka would refuse, else None."""
    for name, value in configs.items():
        if name not in TOPIC_CONFIG_NAMES:
            return f"unknown topic config {name}"
        if value is None:
            continue
        if name in _CHOICES and value not in _CHOICES[name]:
            return f"invalid value {value!r} for {name}"
        if name not in _CHOICES:
            try:
                int(value)
            except ValueError:
                return f"{name} must be a number, got {value!r}"
    return None


def effective(broker_config, overrides: dict[str, str]) -> dict[str, tuple[str | None, bool]]:
    """name -> (value, is_default) for every topic config."""
    out = {}
    for name in sorted(TOPIC_CONFIG_NAMES):
        if name in overrides:
            out[name] = (overrides[name], False)
        elif name in _FROM_BROKER:
            value = broker_config[_FROM_BROKER[name]]
            out[name] = (None if value is None else str(value), True)
        else:
            out[name] = (_FIXED_DEFAULTS[name], True)
    return out
