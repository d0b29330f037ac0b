"""DescribeTransactions: the coordinator's state of transactional ids (KIP-664)."""

from broker.errors import ErrorCode
from broker.handlers import Api
from broker.security.authorization import IN_HANDLER
from broker.security.authorizer import TOPIC, TRANSACTIONAL_ID

API = Api("DescribeTransactions", (0, 0), acl=IN_HANDLER)


def _describe(broker, header, transactional_id: str) -> dict:
    txn = broker.transactions.describe(transactional_id)
    if txn is None:
        error = broker.transactions.coordinator_error(transactional_id) or ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
        return {"error_code": error, "transactional_id": transactional_id,
                "transaction_state": "", "transaction_timeout_ms": 0, "transaction_start_time_ms": -1,
                "producer_id": -1, "producer_epoch": -1, "topics": []}
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(txn.partitions):
        # as Kafka: only the topics the principal may describe
        if broker.authorizer.authorize(header, "Describe", TOPIC, topic, log_denied=False):
            by_topic.setdefault(topic, []).append(partition)
    return {
        "error_code": ErrorCode.NONE,
        "transactional_id": transactional_id,
        "transaction_state": txn.state.wire_name,
        "transaction_timeout_ms": txn.timeout_ms,
        "transaction_start_time_ms": txn.start_ms,
        "producer_id": txn.producer_id,
        "producer_epoch": txn.producer_epoch,
        "topics": [{"topic": topic, "partitions": partitions} for topic, partitions in by_topic.items()],
    }


def handle(broker, request, header) -> dict:
    authorize = broker.authorizer.authorize
    return {"throttle_time_ms": 0,
            "transaction_states": [_describe(broker, header, t) if authorize(header, "Describe", TRANSACTIONAL_ID, t)
                                   else _refused(t) for t in request["transactional_ids"]]}


def _refused(transactional_id: str) -> dict:
    return {"error_code": ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "transactional_id": transactional_id,
            "transaction_state": "", "transaction_timeout_ms": 0, "transaction_start_time_ms": -1,
            "producer_id": -1, "producer_epoch": -1, "topics": []}
