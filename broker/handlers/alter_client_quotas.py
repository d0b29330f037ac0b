"""AlterClientQuotas: set or remove quota values of user / client-id / ip entities, through the metadata
store (the data directory of a standalone broker, etcd in a cluster)."""

import logging

from broker.errors import ErrorCode
from broker.handlers import Api
from broker.network.client_quotas import QuotaError, altered, entity_of
from broker.security.authorization import on_cluster

API = Api("AlterClientQuotas", (0, 1), acl=on_cluster("AlterConfigs"))

log = logging.getLogger("moldau.quotas")


async def handle(broker, request, header) -> dict:
    results, changes = [], []
    for entry in request["entries"]:
        code, message = ErrorCode.NONE, None
        try:
            entity = entity_of(entry["entity"])
            altered(entity, entry["ops"], {})  # what Kafka refuses does not depend on the values in force
            changes.append((entity, entry["ops"]))
        except QuotaError as exc:
            code, message = ErrorCode.INVALID_REQUEST, str(exc)
        results.append({"error_code": code, "error_message": message, "entity": entry["entity"]})
    if changes and not request["validate_only"]:
        try:
            await broker.store.alter_client_quotas(changes)
        except TimeoutError as exc:  # other writers kept winning: retriable
            for result in results:
                if not result["error_code"]:
                    result.update(error_code=ErrorCode.REQUEST_TIMED_OUT, error_message=str(exc))
        except OSError as exc:  # say the values are not stored
            log.error("could not store client quotas: %s", exc)
            for result in results:
                if not result["error_code"]:
                    result.update(error_code=ErrorCode.KAFKA_STORAGE_ERROR, error_message=str(exc))
    return {"throttle_time_ms": 0, "entries": results}
