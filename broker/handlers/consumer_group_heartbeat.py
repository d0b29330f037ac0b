"""ConsumerGroupHeartbeat: join, stay in, reconcile with and leave a KIP-848 consumer group.

v1 (KIP-1082): the member id is the client's own, sent with its first heartbeat.
"""

API = "ConsumerGroupHeartbeat"
VERSIONS = (0, 1)


def handle(broker, request, header):
    # (Read on the group is checked before, as for JoinGroup: broker/security/authorization.py)
    return broker.groups.consumer.heartbeat(request, header.api_version, header.client_id or "", header.client_host)
