"""WriteTxnMarkers: the transaction coordinator's commit and abort markers, written in partition logs.

Markers take their own append path: they carry no sequence, only the
producer epoch and the coordinator epoch, which must not be older than the
partition has seen. A marker landing in __consumer_offsets also settles the
producer's pending offset commits there. Kafka's admin tools send this
request too, to abort a hanging transaction in one partition (`moldau
transactions abort`); a coordinator epoch above any coordinator's is refused.
"""

import logging

from broker.broker import now_ms
from broker.errors import ErrorCode
from broker.group import OFFSETS_TOPIC
from broker.security.authorizer import CLUSTER, CLUSTER_NAME
from broker.transaction.coordinator import COORDINATOR_EPOCH
from storage.errors import InvalidProducerEpoch, TransactionCoordinatorFenced

API = "WriteTxnMarkers"
VERSIONS = (0, 2)

log = logging.getLogger("moldau.markers")


def _write(broker, topic: str, partition: int, marker: dict, now: int) -> ErrorCode:
    leader, error = broker.replicas.leader_partition(topic, partition)
    if leader is None:
        return error
    log_ = leader.log
    producer_id, committed = marker["producer_id"], marker["transaction_result"]
    if marker["coordinator_epoch"] > COORDINATOR_EPOCH:
        # No coordinator has that epoch; taken, it would fence the real one for this producer here,
        # and the producer's next transaction in this partition would never get its marker.
        log.info("refused marker for %s-%d: coordinator epoch %d, there is none above %d",
                 topic, partition, marker["coordinator_epoch"], COORDINATOR_EPOCH)
        return ErrorCode.INVALID_REQUEST
    broker.fail_marker()
    try:
        log_.append_marker(producer_id, marker["producer_epoch"], marker["coordinator_epoch"], committed, now,
                           leader_epoch=leader.leader_epoch)
    except InvalidProducerEpoch as exc:
        log.info("refused marker for %s-%d: %s", topic, partition, exc)
        return ErrorCode.INVALID_PRODUCER_EPOCH
    except TransactionCoordinatorFenced as exc:
        log.info("refused marker for %s-%d: %s", topic, partition, exc)
        return ErrorCode.TRANSACTION_COORDINATOR_FENCED
    except OSError as exc:
        log.error("marker append to %s-%d failed: %s", topic, partition, exc)
        return ErrorCode.KAFKA_STORAGE_ERROR
    broker.kill_after_marker()
    broker.notify_append(topic, partition)
    if topic == OFFSETS_TOPIC:
        broker.groups.complete_txn_offsets(partition, producer_id, committed)
    return ErrorCode.NONE


def handle(broker, request, header) -> dict:
    # Kafka: Alter on the cluster (an admin aborting a hanging transaction), else ClusterAction (a coordinator)
    authorizer = broker.authorizer
    allowed = (authorizer.authorize(header, "Alter", CLUSTER, CLUSTER_NAME, log_denied=False)
               or authorizer.authorize(header, "ClusterAction", CLUSTER, CLUSTER_NAME))
    now = now_ms()
    results = []
    for marker in request["markers"]:
        topics = [
            {
                "name": t["name"],
                "partitions": [
                    {"partition_index": p, "error_code": _write(broker, t["name"], p, marker, now) if allowed
                     else ErrorCode.CLUSTER_AUTHORIZATION_FAILED}
                    for p in t["partition_indexes"]
                ],
            }
            for t in marker["topics"]
        ]
        results.append({"producer_id": marker["producer_id"], "topics": topics})
    return {"markers": results}
