"""IncrementalAlterConfigs: set, delete, append to or subtract from single topic configs; set or delete
share group configs (the GROUP resource)."""

from broker import topic_configs
from broker.errors import ErrorCode
from broker.security.authorization import config_refusal
from broker.share.group_configs import GROUP_RESOURCE
from storage.config import LOG_CONFIG_NAMES

API = "IncrementalAlterConfigs"
VERSIONS = (0, 1)

SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


def _list(value: str | None) -> list[str]:
    return [item.strip() for item in (value or "").split(",") if item.strip()]


def _changes(ops: list[dict]):
    """The function from the current topic configs to the new ones, or to an error message."""

    def apply(current: dict[str, str], in_force) -> dict[str, str] | str:
        names = [op["name"] for op in ops]
        if len(set(names)) != len(names):
            return "a config appears twice in one resource"
        for op in ops:
            name, value, operation = op["name"], op["value"], op["config_operation"]
            config = topic_configs.TOPIC_CONFIGS.get(name)
            if config is None:
                return f"unknown topic config {name}"
            if operation == SET:
                current[name] = value
            elif operation == DELETE:
                current.pop(name, None)
            elif operation in (APPEND, SUBTRACT):
                if config.type != topic_configs.LIST:
                    return f"{name} is not a list: it cannot be appended to or subtracted from"
                default = in_force.topic_value(name) if name in LOG_CONFIG_NAMES else config.default
                items = _list(current.get(name, default))
                given = _list(value)
                if operation == APPEND:
                    items += [item for item in given if item not in items]
                else:
                    items = [item for item in items if item not in given]
                current[name] = ",".join(items)
            else:
                return f"unknown config operation {operation}"
        return current

    return apply


def _changes_of(resource: dict):
    if resource["resource_type"] != topic_configs.BROKER_RESOURCE:
        return _changes(resource["configs"])
    # the broker's TLS stores: SET a value or DELETE it (back to server.properties)
    return {op["name"]: op["value"] if op["config_operation"] == SET else None for op in resource["configs"]}


def handle(broker, request, header) -> dict:
    responses = []
    for resource in request["resources"]:
        refusal = config_refusal(broker.authorizer, header, "AlterConfigs", resource["resource_type"],
                                 resource["resource_name"])
        if resource["resource_type"] == topic_configs.BROKER_RESOURCE and any(
                op["config_operation"] not in (SET, DELETE) for op in resource["configs"]):
            refusal = ErrorCode.INVALID_REQUEST  # no broker config that changes at run time is a list
        if refusal:
            code, message = refusal, None
        elif resource["resource_type"] == GROUP_RESOURCE:  # share groups' configs
            code, message = broker.share.configs.alter(resource["resource_name"], resource["configs"],
                                                       request["validate_only"])
        else:
            code, message = topic_configs.alter(broker, resource["resource_type"], resource["resource_name"],
                                                _changes_of(resource), request["validate_only"])
        responses.append({"error_code": code, "error_message": message,
                          "resource_type": resource["resource_type"], "resource_name": resource["resource_name"]})
    return {"throttle_time_ms": 0, "responses": responses}
