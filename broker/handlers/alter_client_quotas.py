"""AlterClientQuotas: set or remove quota values of user / client-id / ip entities, kept on disk."""

import logging

from broker.client_quotas import QuotaError, entity_of
from broker.errors import ErrorCode

API = "AlterClientQuotas"
VERSIONS = (0, 1)

log = logging.getLogger("moldau.quotas")


def handle(broker, request, header) -> dict:
    results = []
    changed = False
    for entry in request["entries"]:
        code, message = ErrorCode.NONE, None
        try:
            broker.quotas.alter(entity_of(entry["entity"]), entry["ops"], request["validate_only"])
            changed = changed or not request["validate_only"]
        except QuotaError as exc:
            code, message = ErrorCode.INVALID_REQUEST, str(exc)
        results.append({"error_code": code, "error_message": message, "entity": entry["entity"]})
    if changed:
        try:
            broker.quotas.save()
        except OSError as exc:  # the values apply until a restart; say they are not stored
            log.error("could not store client quotas: %s", exc)
            for result in results:
                if not result["error_code"]:
                    result.update(error_code=ErrorCode.KAFKA_STORAGE_ERROR, error_message=str(exc))
    return {"throttle_time_ms": 0, "entries": results}
