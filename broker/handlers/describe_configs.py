"""DescribeConfigs: topic and broker configs with their sources."""

from broker import topic_configs
from broker.config import SETTINGS
from broker.errors import ErrorCode

API = "DescribeConfigs"
VERSIONS = (1, 4)

TOPIC = 2
BROKER = 4
# config sources
DYNAMIC_TOPIC_CONFIG = 1
STATIC_BROKER_CONFIG = 4
DEFAULT_CONFIG = 5


def _entry(name, value, source) -> dict:
    return {"name": name, "value": value, "read_only": source != DYNAMIC_TOPIC_CONFIG,
            "config_source": source, "is_sensitive": False, "synonyms": [], "documentation": None}


def _configs(broker, resource) -> tuple[int, str | None, list]:
    rtype, name = resource["resource_type"], resource["resource_name"]
    if rtype == TOPIC:
        topic = broker.logs.topic(name)
        if topic is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"unknown topic {name}", []
        values = topic_configs.effective(broker.config, topic.configs)
        return 0, None, [_entry(k, v, DEFAULT_CONFIG if default else DYNAMIC_TOPIC_CONFIG)
                         for k, (v, default) in values.items()]
    if rtype == BROKER:
        if name not in ("", str(broker.node_id)):
            return ErrorCode.INVALID_REQUEST, f"unknown broker {name}", []
        return 0, None, [_entry(s.name, None if broker.config[s.name] is None else str(broker.config[s.name]),
                                STATIC_BROKER_CONFIG) for s in SETTINGS]
    return ErrorCode.INVALID_REQUEST, f"resource type {rtype} is not supported", []


def handle(broker, request, header) -> dict:
    results = []
    for resource in request["resources"]:
        code, message, entries = _configs(broker, resource)
        keys = resource["configuration_keys"]
        if keys is not None:
            entries = [e for e in entries if e["name"] in keys]
        results.append({"error_code": code, "error_message": message,
                        "resource_type": resource["resource_type"],
                        "resource_name": resource["resource_name"], "configs": entries})
    return {"throttle_time_ms": 0, "results": results}
