"""AddOffsetsToTxn: a consumer group's offsets join the producer's transaction (send_offsets_to_transaction).

The group's partition of __consumer_offsets becomes a partition of the
transaction, so the commit or abort marker reaches the offsets as well.
"""

from broker.coordinator.partitions import then
from broker.handlers import Api
from broker.security.authorization import GROUP_READ, TXN_WRITE
from broker.transaction import fenced_for_version

API = Api("AddOffsetsToTxn", (0, 4), acl=TXN_WRITE + GROUP_READ)

PRODUCER_FENCED_SINCE = 2


def handle(broker, request, header):
    group_id = request["group_id"]
    error = broker.transactions.add_offsets(request["transactional_id"], request["producer_id"],
                                            request["producer_epoch"], group_id,
                                            broker.groups.offsets_partition(group_id))
    return then(broker.transactions.committed(request["transactional_id"], error), lambda error: {
        "throttle_time_ms": 0, "error_code": fenced_for_version(error, header.api_version, PRODUCER_FENCED_SINCE)})
