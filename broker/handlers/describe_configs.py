"""DescribeConfigs: topic, broker and (share) group configs with their types, sources and synonyms.

A topic config's value is the one in force: the topic's own (DYNAMIC_TOPIC),
else the broker setting it defaults to when server.properties sets it
(STATIC_BROKER), else Kafka's default (DEFAULT). A broker config's value is this
broker's dynamic one (DYNAMIC_BROKER), else the cluster default's (DYNAMIC_DEFAULT_BROKER),
else server.properties' or the built-in default (broker/config/dynamic_configs.py); those Kafka
changes at run time are not read-only. The BROKER resource named "" is the cluster default:
only its dynamic configs, as Kafka describes it. BROKER_LOGGER lists this broker's loggers
and their levels (broker/config/log_levels.py).

The resources asked for are a set: one named many times is described once.
"""

from broker.config.dynamic_configs import DEFAULT_ENTITY, DYNAMIC, default_text, describable, setting_type
from broker.config.group_configs import GROUP_RESOURCE
from broker.config.log_levels import loggers
from broker.errors import ErrorCode
from broker.handlers import Api
from broker.security.authorization import IN_HANDLER, config_refusal
from broker.security.tls_reload import RECONFIGURABLE
from storage.config import LOG_CONFIG_NAMES, STRING, TOPIC_CONFIGS

API = Api("DescribeConfigs", (1, 4), acl=IN_HANDLER)

TOPIC = 2
BROKER = 4
BROKER_LOGGER = 8
# config sources
DYNAMIC_TOPIC_CONFIG = 1
DYNAMIC_BROKER_CONFIG = 2
DYNAMIC_DEFAULT_BROKER_CONFIG = 3
STATIC_BROKER_CONFIG = 4
DEFAULT_CONFIG = 5
DYNAMIC_BROKER_LOGGER_CONFIG = 6

_BROKER_DEFAULTS = {name: default_text(name) for name in describable()}
_SENSITIVE = frozenset({"ssl.key.password", "ssl.keystore.key", "sasl.jaas.config"})  # Kafka's PASSWORD type


def _entry(name, value, source, config_type, read_only, synonyms, documentation=None) -> dict:
    return {"name": name, "value": value, "read_only": read_only, "config_source": source,
            "is_default": source == DEFAULT_CONFIG, "is_sensitive": False, "synonyms": synonyms,
            "config_type": config_type, "documentation": documentation}


def _synonym(name, value, source) -> dict:
    return {"name": name, "value": value, "source": source}


def _config_synonyms(broker, names) -> list[dict]:
    """The broker settings ``names`` at every level that sets them, most specific level first, in the
    order of ``names`` within a level (Kafka's configSynonyms)."""
    found = [_synonym(n, value, source) for n in names for value, source in broker.broker_configs.layers(n)]
    found += [_synonym(n, _BROKER_DEFAULTS[n], DEFAULT_CONFIG) for n in names if _BROKER_DEFAULTS.get(n) is not None]
    return sorted(found, key=lambda s: s["source"])  # stable: the order of names is kept within a level


def _topic_synonyms(broker, topic, config) -> list[dict]:
    """Where the value could come from, the one in force first (Kafka's order)."""
    found = []
    if config.name in topic.configs:
        found.append(_synonym(config.name, topic.configs[config.name], DYNAMIC_TOPIC_CONFIG))
    found += _config_synonyms(broker, config.synonyms)
    if not any(s["source"] == DEFAULT_CONFIG for s in found):
        found.append(_synonym(config.name, config.default, DEFAULT_CONFIG))
    return found


def topic_entries(broker, topic) -> list[dict]:
    """Every topic config of ``topic`` (a TopicMetadata) with its value in force, source and synonyms."""
    in_force = broker.logs.config_for(topic)
    entries = []
    for name, config in sorted(TOPIC_CONFIGS.items()):
        synonyms = _topic_synonyms(broker, topic, config)
        value = in_force.topic_value(name) if name in LOG_CONFIG_NAMES else synonyms[0]["value"]
        entries.append(_entry(name, value, synonyms[0]["source"], config.type, False, synonyms, config.doc))
    return entries


# Kafka's brokerConfigSynonyms among Moldau's settings: one value that several names can set
_RETENTION = ("log.retention.ms", "log.retention.minutes", "log.retention.hours")


def _broker_entry(broker, name: str, sources: tuple[int, ...]) -> dict:
    """One broker setting, its synonyms from the levels ``sources`` (from the first one that names it)."""
    synonyms = [s for s in _config_synonyms(broker, _RETENTION if name in _RETENTION else (name,))
                if s["source"] in sources]
    while synonyms and synonyms[0]["name"] != name:
        synonyms.pop(0)
    source = synonyms[0]["source"] if synonyms else DEFAULT_CONFIG
    read_only = name not in DYNAMIC and name not in RECONFIGURABLE
    value = broker.broker_configs.in_force_text(name) if DEFAULT_CONFIG in sources else synonyms[0]["value"]
    entry = _entry(name, value, source, setting_type(name), read_only, synonyms)
    if name in _SENSITIVE:
        entry.update(value=None, is_sensitive=True, synonyms=[dict(s, value=None) for s in synonyms])
    return entry


def _broker_entries(broker) -> list[dict]:
    every_level = (DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG)
    return [_broker_entry(broker, name, every_level) for name in describable()]


def _cluster_default_entries(broker) -> list[dict]:
    """The cluster default's dynamic configs alone, as Kafka describes the resource named ""."""
    configs = broker.broker_configs.entities.get(DEFAULT_ENTITY, {})
    return [_broker_entry(broker, name, (DYNAMIC_DEFAULT_BROKER_CONFIG,)) for name in sorted(configs)]


def _configs(broker, resource) -> tuple[int, str | None, list]:
    rtype, name = resource["resource_type"], resource["resource_name"]
    if rtype == TOPIC:
        topic = broker.store.topic(name)
        if topic is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"unknown topic {name}", []
        return 0, None, topic_entries(broker, topic)
    if rtype == BROKER:
        if name == "":
            return 0, None, _cluster_default_entries(broker)
        if name != str(broker.node_id):
            return ErrorCode.INVALID_REQUEST, f"unknown broker {name}", []
        return 0, None, _broker_entries(broker)
    if rtype == BROKER_LOGGER:
        if name != str(broker.node_id):
            return ErrorCode.INVALID_REQUEST, f"name this broker ({broker.node_id}), not {name!r}", []
        return 0, None, [_entry(logger, level, DYNAMIC_BROKER_LOGGER_CONFIG, STRING, False, [])
                         for logger, level in loggers().items()]
    if rtype == GROUP_RESOURCE:
        return 0, None, [_entry(n, v, source, t, False, [_synonym(n, v, source)])
                         for n, v, source, t in broker.group_configs.describe(name)]
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
        for entry in entries:
            if not request["include_synonyms"]:
                entry["synonyms"] = []
            if not request.get("include_documentation"):
                entry["documentation"] = None
        results.append({"error_code": code, "error_message": message,
                        "resource_type": resource["resource_type"],
                        "resource_name": resource["resource_name"], "configs": entries})
    return {"throttle_time_ms": 0, "results": results}
