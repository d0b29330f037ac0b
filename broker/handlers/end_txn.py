"""EndTxn: commit or abort the producer's transaction.

Answered once PrepareCommit or PrepareAbort is in __transaction_state; the
markers are written afterwards, and until they all are, the producer's next
transactional request gets CONCURRENT_TRANSACTIONS.
"""

from broker.transaction import fenced_for_version
from broker.transaction.metadata import NO_PRODUCER_EPOCH
from protocol.records import NO_PRODUCER_ID

API = "EndTxn"
VERSIONS = (0, 5)

PRODUCER_FENCED_SINCE = 2


def handle(broker, request, header) -> dict:
    error = broker.transactions.end_txn(request["transactional_id"], request["producer_id"],
                                        request["producer_epoch"], request["committed"])
    # v5's producer id and epoch tell a KIP-890 client its bumped epoch; this coordinator bumps none
    return {"throttle_time_ms": 0, "error_code": fenced_for_version(error, header.api_version, PRODUCER_FENCED_SINCE),
            "producer_id": NO_PRODUCER_ID, "producer_epoch": NO_PRODUCER_EPOCH}
