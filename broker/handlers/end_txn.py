"""EndTxn: commit or abort the producer's transaction.

Answered once PrepareCommit or PrepareAbort is in __transaction_state; the
markers are written afterwards, and until they all are, the producer's next
transactional request gets CONCURRENT_TRANSACTIONS. v5 is transaction
version 2 (KIP-890 part 2): the epoch is bumped, and the answer names the
producer id and epoch the producer goes on with.
"""

from broker.coordinator.partitions import then
from broker.handlers import Api
from broker.security.authorization import TXN_WRITE
from broker.transaction import fenced_for_version
from broker.transaction.metadata import NO_PRODUCER_EPOCH
from protocol.records import NO_PRODUCER_ID

API = Api("EndTxn", (0, 5), acl=TXN_WRITE)

PRODUCER_FENCED_SINCE = 2
BUMPS_EPOCH_SINCE = 5


def handle(broker, request, header):
    args = (request["transactional_id"], request["producer_id"], request["producer_epoch"], request["committed"])
    if header.api_version >= BUMPS_EPOCH_SINCE:
        error, producer_id, epoch = broker.transactions.end_txn_bumping_epoch(*args)
    else:
        error, producer_id, epoch = broker.transactions.end_txn(*args), NO_PRODUCER_ID, NO_PRODUCER_EPOCH

    def respond(error) -> dict:
        return {"throttle_time_ms": 0,
                "error_code": fenced_for_version(error, header.api_version, PRODUCER_FENCED_SINCE),
                "producer_id": producer_id if not error else NO_PRODUCER_ID,
                "producer_epoch": epoch if not error else NO_PRODUCER_EPOCH}

    # once PrepareCommit/PrepareAbort is committed
    return then(broker.transactions.committed(request["transactional_id"], error), respond)
