"""ConsumerGroupHeartbeat: join, stay in, reconcile with and leave a KIP-848 consumer group.

v1 (KIP-1082): the member id is the client's own, sent with its first heartbeat.
"""

from broker.handlers import Api
from broker.security.authorization import GROUP_READ

API = Api("ConsumerGroupHeartbeat", (0, 1), acl=GROUP_READ)


def handle(broker, request, header):
    # (Read on the group is checked before it runs: its API's acl)
    return broker.groups.consumer.heartbeat(request, header.api_version, header.client_id or "", header.client_host)
