"""AlterConfigs: replace a topic's configs as a whole (those not given return to their defaults)."""

from broker.config import topic_configs
from broker.config.config_operations import SET
from broker.handlers import Api
from broker.security.authorization import IN_HANDLER, config_refusal

API = Api("AlterConfigs", (0, 2), acl=IN_HANDLER)


async def handle(broker, request, header) -> dict:
    responses = []
    for resource in request["resources"]:
        wanted = {c["name"]: c["value"] for c in resource["configs"]}
        refusal = config_refusal(broker.authorizer, header, "AlterConfigs", resource["resource_type"],
                                 resource["resource_name"])
        changes = ({n: (SET, v) for n, v in wanted.items()}, True) \
            if resource["resource_type"] == topic_configs.BROKER_RESOURCE else \
            lambda current, in_force, wanted=wanted: wanted
        code, message = (refusal, None) if refusal else await topic_configs.alter(broker, resource["resource_type"], resource["resource_name"],
                                            changes, request["validate_only"])
        responses.append({"error_code": code, "error_message": message,
                          "resource_type": resource["resource_type"], "resource_name": resource["resource_name"]})
    return {"throttle_time_ms": 0, "responses": responses}
