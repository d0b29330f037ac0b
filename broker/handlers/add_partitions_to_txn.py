"""AddPartitionsToTxn: partitions join a producer's transaction before it writes to them.

v0-3 carry one transaction (a producer's request); v4+ a batch of them, each
optionally verify_only: the KIP-890 question a partition leader asks before
it takes a transactional write, answered without changing anything.
"""

from typing import Awaitable

from broker.coordinator.partitions import settled, then
from broker.errors import ErrorCode
from broker.handlers import Api
from broker.security.authorization import IN_HANDLER
from broker.security.authorizer import CLUSTER, CLUSTER_NAME, TOPIC, TRANSACTIONAL_ID
from broker.transaction import fenced_for_version

API = Api("AddPartitionsToTxn", (0, 5), acl=IN_HANDLER)

PRODUCER_FENCED_SINCE = 2
BATCHED_SINCE = 4


def _errors(broker, header, version: int, transactional_id: str, producer_id: int, epoch: int, topics: list[dict],
            verify_only: bool) -> dict[tuple[str, int], ErrorCode] | Awaitable[dict[tuple[str, int], ErrorCode]]:
    partitions = [(t["name"], p) for t in topics for p in t["partitions"]]
    authorizer = broker.authorizer
    from_client = version < BATCHED_SINCE  # later versions come from brokers, checked for ClusterAction
    if from_client and not authorizer.authorize(header, "Write", TRANSACTIONAL_ID, transactional_id):
        return dict.fromkeys(partitions, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    denied = {tp for tp in partitions if from_client and not authorizer.authorize(header, "Write", TOPIC, tp[0])}
    if denied:
        return {tp: ErrorCode.TOPIC_AUTHORIZATION_FAILED if tp in denied else ErrorCode.OPERATION_NOT_ATTEMPTED
                for tp in partitions}
    unknown = {tp for tp in partitions if broker.logs.log(*tp) is None}
    if unknown:
        return {tp: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if tp in unknown else ErrorCode.OPERATION_NOT_ATTEMPTED
                for tp in partitions}
    coordinator = broker.transactions
    if verify_only:
        return coordinator.verify_partitions(transactional_id, producer_id, epoch, partitions)
    error = coordinator.add_partitions(transactional_id, producer_id, epoch, set(partitions))
    return then(coordinator.committed(transactional_id, error),
                lambda error: dict.fromkeys(partitions, fenced_for_version(error, version, PRODUCER_FENCED_SINCE)))


def _topic_results(errors: dict[tuple[str, int], ErrorCode]) -> list[dict]:
    by_topic: dict[str, list[dict]] = {}
    for (topic, partition), error in errors.items():
        by_topic.setdefault(topic, []).append({"partition_index": partition, "partition_error_code": error})
    return [{"name": topic, "results_by_partition": results} for topic, results in by_topic.items()]


def handle(broker, request, header):
    version = header.api_version
    if version < BATCHED_SINCE:
        errors = _errors(broker, header, version, request["v3_and_below_transactional_id"],
                         request["v3_and_below_producer_id"], request["v3_and_below_producer_epoch"],
                         request["v3_and_below_topics"], verify_only=False)
        return then(errors, lambda errors: {"throttle_time_ms": 0,
                                            "results_by_topic_v3_and_below": _topic_results(errors)})
    return _batched(broker, request, header)


async def _batched(broker, request, header) -> dict:
    """v4+: the brokers' verification (and, for transaction version 2, addition) of many transactions."""
    version = header.api_version
    if not broker.authorizer.authorize(header, "ClusterAction", CLUSTER, CLUSTER_NAME):
        return {"throttle_time_ms": 0, "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                "results_by_transaction": []}
    results = []
    for txn in request["transactions"]:
        errors = await settled(_errors(broker, header, version, txn["transactional_id"], txn["producer_id"],
                                       txn["producer_epoch"], txn["topics"], txn["verify_only"]))
        results.append({"transactional_id": txn["transactional_id"], "topic_results": _topic_results(errors)})
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "results_by_transaction": results}
