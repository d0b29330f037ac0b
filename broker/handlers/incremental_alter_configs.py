"""IncrementalAlterConfigs: set, delete, append to or subtract from single topic configs; set or delete
dynamic broker configs (broker/config/dynamic_configs.py), this broker's log levels (BROKER_LOGGER) and share group
configs (the GROUP resource)."""

import logging

from broker.config import group_configs, log_levels, topic_configs
from broker.config.group_configs import GROUP_RESOURCE
from broker.config.config_operations import APPEND, DELETE, SET, SUBTRACT, config_list, list_changed
from broker.errors import ErrorCode
from broker.handlers import Api
from broker.security.authorization import IN_HANDLER, config_refusal
from storage.config import LIST, LOG_CONFIG_NAMES, TOPIC_CONFIGS

API = Api("IncrementalAlterConfigs", (0, 1), acl=IN_HANDLER)

BROKER_LOGGER = 8

log = logging.getLogger("moldau.configs")


def _changes(ops: list[dict]):
    """The function from the current topic configs to the new ones, or to an error message."""

    def apply(current: dict[str, str], in_force) -> dict[str, str] | str:
        names = [op["name"] for op in ops]
        if len(set(names)) != len(names):
            return "a config appears twice in one resource"
        for op in ops:
            name, value, operation = op["name"], op["value"], op["config_operation"]
            config = TOPIC_CONFIGS.get(name)
            if config is None:
                return f"unknown topic config {name}"
            if operation == SET:
                current[name] = value
            elif operation == DELETE:
                current.pop(name, None)
            elif operation in (APPEND, SUBTRACT):
                if config.type != LIST:
                    return f"{name} is not a list: it cannot be appended to or subtracted from"
                default = in_force.topic_value(name) if name in LOG_CONFIG_NAMES else config.default
                current[name] = list_changed(config_list(current.get(name, default)), operation, value)
            else:
                return f"unknown config operation {operation}"
        return current

    return apply


def _changes_of(resource: dict):
    if resource["resource_type"] != topic_configs.BROKER_RESOURCE:
        return _changes(resource["configs"])
    return {op["name"]: (op["config_operation"], op["value"]) for op in resource["configs"]}, False


def _alter_loggers(broker, resource: dict, validate_only: bool) -> tuple[int, str | None]:
    """BROKER_LOGGER: SET a logger's level or DELETE it (it inherits again), this broker only, not stored."""
    if resource["resource_name"] != str(broker.node_id):
        return ErrorCode.INVALID_REQUEST, f"name this broker ({broker.node_id}), not {resource['resource_name']!r}"
    changes = []
    for op in resource["configs"]:
        if op["config_operation"] not in (SET, DELETE):
            return ErrorCode.INVALID_REQUEST, f"{op['name']}: a log level is set or deleted, not appended to"
        level = op["value"] if op["config_operation"] == SET else None
        if level is None and op["name"] == log_levels.ROOT:
            return ErrorCode.INVALID_REQUEST, "Removing the log level of the root logger is not allowed"
        problem = log_levels.logger_problem(op["name"], level)
        if problem:
            return ErrorCode.INVALID_CONFIG, problem
        changes.append((op["name"], level))
    if not validate_only:
        for name, level in changes:
            log_levels.set_logger_level(name, level)
            log.info("log level of %s %s", name, f"set to {level}" if level else "unset")
    return ErrorCode.NONE, None


async def handle(broker, request, header) -> dict:
    responses = []
    for resource in request["resources"]:
        refusal = config_refusal(broker.authorizer, header, "AlterConfigs", resource["resource_type"],
                                 resource["resource_name"])
        if refusal:
            code, message = refusal, None
        elif resource["resource_type"] == BROKER_LOGGER:
            code, message = _alter_loggers(broker, resource, request["validate_only"])
        elif resource["resource_type"] == GROUP_RESOURCE:
            code, message = await group_configs.alter(broker, resource["resource_name"], resource["configs"],
                                                      request["validate_only"])
        else:
            code, message = await topic_configs.alter(broker, resource["resource_type"], resource["resource_name"],
                                                      _changes_of(resource), request["validate_only"])
        responses.append({"error_code": code, "error_message": message,
                          "resource_type": resource["resource_type"], "resource_name": resource["resource_name"]})
    return {"throttle_time_ms": 0, "responses": responses}
