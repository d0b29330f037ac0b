"""ListGroups: every group on this coordinator, optionally filtered by state (v4+) and type (v5+)."""

from broker.security.authorizer import GROUP

API = "ListGroups"
VERSIONS = (0, 5)

GROUP_TYPE = "classic"  # the only group protocol this broker speaks


def handle(broker, request, header) -> dict:
    states = {s.lower() for s in request["states_filter"]}
    types = {t.lower() for t in request["types_filter"]}
    authorizer = broker.authorizer
    everything = authorizer.authorize_cluster(header, "Describe")
    groups = [
        {"group_id": g.group_id, "protocol_type": g.protocol_type or "", "group_state": g.state.value, "group_type": GROUP_TYPE}
        for g in broker.groups.groups.values()
        if (not states or g.state.value.lower() in states) and (not types or GROUP_TYPE in types)
        and (everything or authorizer.authorize(header, "Describe", GROUP, g.group_id))
    ]
    return {"throttle_time_ms": 0, "error_code": 0, "groups": groups}
