"""DeleteGroups: remove empty groups and their committed offsets."""

API = "DeleteGroups"
VERSIONS = (0, 2)


def handle(broker, request, header) -> dict:
    results = broker.groups.delete_groups(request["groups_names"])
    return {"throttle_time_ms": 0, "results": [{"group_id": g, "error_code": e} for g, e in results.items()]}
