"""DescribeConfigs: topic, broker and (share) group configs with their types, sources and synonyms.

A topic config's value is the one in force: the topic's own (DYNAMIC_TOPIC),
else the broker setting it defaults to when server.properties sets it
(STATIC_BROKER), else Kafka's default (DEFAULT). Topic configs can be altered
(AlterConfigs, IncrementalAlterConfigs); broker configs are read-only.

The resources asked for are a set: one named many times is described once.
"""

from broker.config import SETTINGS
from broker.errors import ErrorCode
from broker.security.authorization import config_refusal
from broker.share.group_configs import GROUP_RESOURCE
from broker.topic_configs import BOOLEAN, DOUBLE, INT, LONG, STRING, TOPIC_CONFIGS
from storage.config import LOG_CONFIG_NAMES

API = "DescribeConfigs"
VERSIONS = (1, 4)

TOPIC = 2
BROKER = 4
# config sources
DYNAMIC_TOPIC_CONFIG = 1
STATIC_BROKER_CONFIG = 4
DEFAULT_CONFIG = 5

_SETTING_TYPES = {bool: BOOLEAN, float: DOUBLE, str: STRING}
_BROKER_DEFAULTS = {s.name: s.default for s in SETTINGS}


def _text(value) -> str | None:
    if value is None:
        return None
    return str(value).lower() if isinstance(value, bool) else str(value)


def _entry(name, value, source, config_type, read_only, synonyms) -> dict:
    return {"name": name, "value": value, "read_only": read_only, "config_source": source,
            "is_default": source == DEFAULT_CONFIG, "is_sensitive": False, "synonyms": synonyms,
            "config_type": config_type, "documentation": None}


def _synonym(name, value, source) -> dict:
    return {"name": name, "value": value, "source": source}


def _topic_synonyms(broker, topic, config) -> list[dict]:
    """Where the value could come from, the one in force first (Kafka's order)."""
    found = []
    if config.name in topic.configs:
        found.append(_synonym(config.name, topic.configs[config.name], DYNAMIC_TOPIC_CONFIG))
    found += [_synonym(s, _text(broker.config[s]), STATIC_BROKER_CONFIG)
              for s in config.synonyms if s in broker.config.explicit]
    defaults = [s for s in config.synonyms if _BROKER_DEFAULTS[s] is not None]
    if defaults:
        found.append(_synonym(defaults[-1], _text(_BROKER_DEFAULTS[defaults[-1]]), DEFAULT_CONFIG))
    else:
        found.append(_synonym(config.name, config.default, DEFAULT_CONFIG))
    return found


def _topic_entries(broker, topic) -> list[dict]:
    in_force = broker.logs.config_for(topic)
    entries = []
    for name, config in sorted(TOPIC_CONFIGS.items()):
        synonyms = _topic_synonyms(broker, topic, config)
        value = in_force.topic_value(name) if name in LOG_CONFIG_NAMES else synonyms[0]["value"]
        entries.append(_entry(name, value, synonyms[0]["source"], config.type, False, synonyms))
    return entries


def _broker_entries(broker) -> list[dict]:
    entries = []
    for setting in SETTINGS:
        source = STATIC_BROKER_CONFIG if setting.name in broker.config.explicit else DEFAULT_CONFIG
        value = _text(broker.config[setting.name])
        config_type = _SETTING_TYPES.get(type(setting.default), LONG if setting.name.endswith(".ms") else INT)
        entries.append(_entry(setting.name, value, source, config_type, True,
                              [_synonym(setting.name, value, source)]))
    return entries


def _configs(broker, resource) -> tuple[int, str | None, list]:
    rtype, name = resource["resource_type"], resource["resource_name"]
    if rtype == TOPIC:
        topic = broker.logs.topic(name)
        if topic is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"unknown topic {name}", []
        return 0, None, _topic_entries(broker, topic)
    if rtype == BROKER:
        if name not in ("", str(broker.node_id)):
            return ErrorCode.INVALID_REQUEST, f"unknown broker {name}", []
        return 0, None, _broker_entries(broker)
    if rtype == GROUP_RESOURCE:  # share groups' configs
        return 0, None, [_entry(n, v, source, t, False, [_synonym(n, v, source)])
                         for n, v, source, t in broker.share.configs.describe(name)]
    return ErrorCode.INVALID_REQUEST, f"resource type {rtype} is not supported", []


def _distinct(resources: list[dict]) -> list[dict]:
    """Each resource once (with the keys of its first mention): a set, as the admin clients send."""
    seen = {}
    for resource in resources:
        seen.setdefault((resource["resource_type"], resource["resource_name"]), resource)
    return list(seen.values())


def handle(broker, request, header) -> dict:
    results = []
    for resource in _distinct(request["resources"]):
        refusal = config_refusal(broker.authorizer, header, "DescribeConfigs", resource["resource_type"],
                                 resource["resource_name"])
        code, message, entries = (refusal, None, []) if refusal else _configs(broker, resource)
        keys = resource["configuration_keys"]
        if keys is not None:
            keys = set(keys)
            entries = [e for e in entries if e["name"] in keys]
        if not request["include_synonyms"]:
            for entry in entries:
                entry["synonyms"] = []
        results.append({"error_code": code, "error_message": message,
                        "resource_type": resource["resource_type"],
                        "resource_name": resource["resource_name"], "configs": entries})
    return {"throttle_time_ms": 0, "results": results}
