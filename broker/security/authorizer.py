"""Authorization: who may do what (Kafka's Authorizer interface).

Without `authorizer.class.name` every request is allowed, as in Kafka."""

from __future__ import annotations


class AllowAll:
    """No authorizer configured: every principal may perform every operation."""

    enabled = False

    def authorize(self, header, operation: str, resource_type: str, name: str) -> bool:
        return True

    def authorize_cluster(self, header, operation: str) -> bool:
        return True
