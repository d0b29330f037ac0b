"""ListGroups: every group on this coordinator (share groups too: type "share"), optionally filtered by state
(v4+) and type (v5+)."""

from broker.handlers import Api
from broker.security.authorization import IN_HANDLER
from broker.security.authorizer import GROUP

API = Api("ListGroups", (0, 5), acl=IN_HANDLER)


def _listed(g) -> dict:
    """A group as ListGroups shows it; a KIP-848 group (type "consumer") has its own states."""
    if g.consumer is not None:
        return {"group_id": g.group_id, "protocol_type": "consumer", "group_state": g.consumer.state(),
                "group_type": "consumer"}
    return {"group_id": g.group_id, "protocol_type": g.protocol_type or "", "group_state": g.state.value,
            "group_type": "classic"}


def handle(broker, request, header) -> dict:
    states = {s.lower() for s in request["states_filter"]}
    types = {t.lower() for t in request["types_filter"]}
    authorizer = broker.authorizer
    everything = authorizer.authorize_cluster(header, "Describe")
    listed = [(_listed(g), g.group_id) for g in broker.groups.groups.values()]
    listed += [({"group_id": g, "protocol_type": "share", "group_state": broker.share.groups.state(g),
                 "group_type": "share"}, g) for g in sorted(broker.share.groups.group_ids())]
    groups = [
        entry for entry, group_id in listed
        if (not states or entry["group_state"].lower() in states) and (not types or entry["group_type"] in types)
        and (everything or authorizer.authorize(header, "Describe", GROUP, group_id))
    ]
    return {"throttle_time_ms": 0, "error_code": 0, "groups": groups}
