"""InitProducerId: a producer id and epoch for an idempotent or transactional producer.

Without a transactional id every request gets a fresh producer id at epoch 0,
unless (v3+, KIP-360) the producer names the id and epoch it has: then the
epoch is bumped, which fences its own older in-flight batches and lets it
restart its sequences at 0 without losing its id. An epoch that would pass
the int16 range, or a producer id that belongs to a transactional id, gets a
fresh id instead. With a transactional id the transaction coordinator answers.
"""

from broker.coordinator.partitions import settled
from broker.errors import ErrorCode
from broker.handlers import Api
from broker.security.authorization import IN_HANDLER
from broker.security.authorizer import CLUSTER, CLUSTER_NAME, TRANSACTIONAL_ID
from broker.transaction import fenced_for_version
from broker.transaction.metadata import MAX_EPOCH, NO_PRODUCER_EPOCH
from protocol.records import NO_PRODUCER_ID

API = Api("InitProducerId", (0, 5), acl=IN_HANDLER)

PRODUCER_FENCED_SINCE = 4  # older versions are answered INVALID_PRODUCER_EPOCH instead


def _result(code: int, producer_id: int = NO_PRODUCER_ID, epoch: int = NO_PRODUCER_EPOCH) -> dict:
    return {"throttle_time_ms": 0, "error_code": code, "producer_id": producer_id, "producer_epoch": epoch}


async def handle(broker, request, header) -> dict:
    producer_id, epoch = request["producer_id"], request["producer_epoch"]
    if (producer_id == NO_PRODUCER_ID) != (epoch == NO_PRODUCER_EPOCH) or epoch < NO_PRODUCER_EPOCH:
        return _result(ErrorCode.INVALID_REQUEST)
    authorizer = broker.authorizer
    if request["transactional_id"] is not None:
        if not authorizer.authorize(header, "Write", TRANSACTIONAL_ID, request["transactional_id"]):
            return _result(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        error, producer_id, epoch = broker.transactions.init_producer_id(
            request["transactional_id"], request["transaction_timeout_ms"], producer_id, epoch)
        error = await settled(broker.transactions.committed(request["transactional_id"], error))
        if error:
            producer_id, epoch = NO_PRODUCER_ID, NO_PRODUCER_EPOCH
        return _result(fenced_for_version(error, header.api_version, PRODUCER_FENCED_SINCE), producer_id, epoch)
    if authorizer.enabled and not (authorizer.authorize(header, "IdempotentWrite", CLUSTER, CLUSTER_NAME, log_denied=False)
                                   or authorizer.may_write_some_topic(header)):
        return _result(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    ids = broker.producer_ids
    if ids.issued(producer_id) and epoch < MAX_EPOCH and not broker.transactions.owns_producer_id(producer_id):
        return _result(ErrorCode.NONE, producer_id, epoch + 1)
    # a first request, an exhausted epoch, an id this broker never issued, or a transactional id's
    # (whose epochs only its coordinator moves: its markers must not be fenced)
    producer_id = ids.generate()
    if producer_id is None:  # no id could be reserved (a full disk): clients retry this error
        return _result(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
    return _result(ErrorCode.NONE, producer_id, 0)
