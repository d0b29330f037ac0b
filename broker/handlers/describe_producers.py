"""DescribeProducers: the producer state each partition keeps (KIP-664)."""

from broker.errors import ErrorCode
from broker.handlers import Api
from broker.security.authorization import IN_HANDLER
from broker.security.authorizer import TOPIC

API = Api("DescribeProducers", (0, 0), acl=IN_HANDLER)


def _partition(broker, header, topic: str, index: int) -> dict:
    if not broker.authorizer.authorize(header, "Read", TOPIC, topic):
        return {"partition_index": index, "error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                "error_message": None, "active_producers": []}
    log_ = broker.logs.log(topic, index)
    if log_ is None:
        return {"partition_index": index, "error_code": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                "error_message": None, "active_producers": []}
    producers = [
        {
            "producer_id": entry.producer_id,
            "producer_epoch": entry.producer_epoch,
            "last_sequence": entry.last_seq,
            "last_timestamp": entry.last_timestamp,
            "coordinator_epoch": entry.coordinator_epoch,
            "current_txn_start_offset": entry.current_txn_first_offset,
        }
        for entry in log_.producer_state.producers.values()
    ]
    return {"partition_index": index, "error_code": 0, "error_message": None, "active_producers": producers}


def handle(broker, request, header) -> dict:
    topics = [
        {"name": t["name"], "partitions": [_partition(broker, header, t["name"], i) for i in t["partition_indexes"]]}
        for t in request["topics"]
    ]
    return {"throttle_time_ms": 0, "topics": topics}
