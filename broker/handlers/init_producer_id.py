"""InitProducerId: a producer id and epoch for an idempotent producer.

Without a transactional id every request gets a fresh producer id at epoch 0,
unless (v3+, KIP-360) the producer names the id and epoch it has: then the
epoch is bumped, which fences its own older in-flight batches and lets it
restart its sequences at 0 without losing its id. An epoch that would pass
the int16 range gets a fresh id instead.
"""

import logging

from broker.errors import ErrorCode
from protocol.records import NO_PRODUCER_ID

API = "InitProducerId"
VERSIONS = (0, 5)

NO_PRODUCER_EPOCH = -1
MAX_EPOCH = 0x7FFF

log = logging.getLogger("moldau.producer_ids")


def _result(code: int, producer_id: int = NO_PRODUCER_ID, epoch: int = NO_PRODUCER_EPOCH) -> dict:
    return {"throttle_time_ms": 0, "error_code": code, "producer_id": producer_id, "producer_epoch": epoch}


def handle(broker, request, header) -> dict:
    if request["transactional_id"] is not None:
        # Transactions need a transaction coordinator, which this broker does not have yet.
        # UNSUPPORTED_VERSION is fatal at once in librdkafka, the Java client and kafka-python.
        log.info("refused InitProducerId for transactional id %r: transactions are not supported",
                 request["transactional_id"])
        return _result(ErrorCode.UNSUPPORTED_VERSION)
    producer_id, epoch = request["producer_id"], request["producer_epoch"]
    if (producer_id == NO_PRODUCER_ID) != (epoch == NO_PRODUCER_EPOCH) or epoch < NO_PRODUCER_EPOCH:
        return _result(ErrorCode.INVALID_REQUEST)
    ids = broker.producer_ids
    if ids.issued(producer_id) and epoch < MAX_EPOCH:
        return _result(ErrorCode.NONE, producer_id, epoch + 1)
    # a first request, an exhausted epoch, or an id this broker never issued
    return _result(ErrorCode.NONE, ids.generate(), 0)
