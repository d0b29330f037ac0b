"""DescribeClientQuotas: the quotas whose entities match a filter (Kafka's matching rules)."""

from broker.errors import ErrorCode
from broker.handlers import Api
from broker.network.client_quotas import CLIENT_ID, IP, USER
from broker.security.authorization import on_cluster

API = Api("DescribeClientQuotas", (0, 1), acl=on_cluster("DescribeConfigs"))

EXACT, DEFAULT, SPECIFIED = 0, 1, 2


def _matches(entity, components: list[dict], strict: bool) -> bool:
    names = dict(entity)
    for c in components:
        if c["entity_type"] not in names:
            return False
        name = names[c["entity_type"]]
        if (c["match_type"] == EXACT and name != c["match"] or c["match_type"] == DEFAULT and name is not None
                or c["match_type"] == SPECIFIED and name is None):
            return False
    return not strict or len(names) == len(components)


def _invalid(components: list[dict]) -> str | None:
    types = [c["entity_type"] for c in components]
    if len(set(types)) != len(types):
        return "an entity type is named twice"
    for c in components:
        if c["entity_type"] not in (USER, CLIENT_ID, IP):
            return f"unknown entity type {c['entity_type']!r}"
        if c["match_type"] not in (EXACT, DEFAULT, SPECIFIED):
            return f"unknown match type {c['match_type']}"
    return None


def handle(broker, request, header) -> dict:
    problem = _invalid(request["components"])
    if problem:
        return {"throttle_time_ms": 0, "error_code": ErrorCode.INVALID_REQUEST, "error_message": problem,
                "entries": None}
    entries = [
        {"entity": [{"entity_type": t, "entity_name": n} for t, n in entity],
         "values": [{"key": k, "value": v} for k, v in sorted(values.items())]}
        for entity, values in broker.quotas.values.items()
        if _matches(entity, request["components"], request["strict"])
    ]
    return {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "entries": entries}
