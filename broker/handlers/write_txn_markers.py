"""WriteTxnMarkers: the transaction coordinator's commit and abort markers, written in partition logs.

Markers take their own append path: they carry no sequence, only the
producer epoch and the coordinator epoch. Each partition's producer state
keeps the coordinator epoch of the producer's last marker (rebuilt from the
markers by followers and by recovery), and a marker from an older
coordinator is TRANSACTION_COORDINATOR_FENCED there. As in Kafka, a marker is
written with acks=all: the answer waits until the partition's in-sync
replicas have it, so a new leader never lacks a marker its coordinator
counted as written. A marker landing in __consumer_offsets also settles the
producer's pending offset commits there. Kafka's admin tools send this
request too, to abort a hanging transaction in one partition (`moldau
transactions abort`); a coordinator epoch above any coordinator's is refused.
"""

import asyncio
import logging

from broker.cluster.partition import Partition
from broker.coordinator.internal_topics import OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC
from broker.errors import ErrorCode
from broker.handlers import Api
from broker.security.authorization import IN_HANDLER
from broker.security.authorizer import CLUSTER, CLUSTER_NAME
from storage import clock
from storage.errors import InvalidProducerEpoch, TransactionCoordinatorFenced

API = Api("WriteTxnMarkers", (0, 2), acl=IN_HANDLER)

log = logging.getLogger("moldau.markers")


def highest_coordinator_epoch(broker) -> int:
    """A coordinator's epoch is the leader epoch of its partition of __transaction_state."""
    cache = broker.store.cache
    states = (cache.partition_state(TRANSACTION_STATE_TOPIC, p)
              for p in range(broker.transactions.state_manager.num_partitions))
    return max((state.leader_epoch for state in states if state is not None), default=0)


def _write(broker, topic: str, partition: int, marker: dict, now: int) -> tuple[ErrorCode, Partition | None, int]:
    """(error, and once appended: the partition and the offset its in-sync replicas must reach)."""
    leader, error = broker.replicas.leader_partition(topic, partition)
    if leader is None:
        return error, None, -1
    log_ = leader.log
    producer_id, committed = marker["producer_id"], marker["transaction_result"]
    if marker["coordinator_epoch"] > (highest := highest_coordinator_epoch(broker)):
        # No coordinator has that epoch; taken, it would fence the real one for this producer here,
        # and the producer's next transaction in this partition would never get its marker.
        log.info("refused marker for %s-%d: coordinator epoch %d, there is none above %d",
                 topic, partition, marker["coordinator_epoch"], highest)
        return ErrorCode.INVALID_REQUEST, None, -1
    if len(leader.state.isr) < log_.config.min_insync_replicas:
        return ErrorCode.NOT_ENOUGH_REPLICAS, None, -1  # the coordinator sends it again
    broker.fail_marker()
    try:
        offset = log_.append_marker(producer_id, marker["producer_epoch"], marker["coordinator_epoch"], committed,
                                    now, leader_epoch=leader.leader_epoch)
    except InvalidProducerEpoch as exc:
        log.info("refused marker for %s-%d: %s", topic, partition, exc)
        return ErrorCode.INVALID_PRODUCER_EPOCH, None, -1
    except TransactionCoordinatorFenced as exc:
        log.info("refused marker for %s-%d: %s", topic, partition, exc)
        return ErrorCode.TRANSACTION_COORDINATOR_FENCED, None, -1
    except OSError as exc:
        log.error("marker append to %s-%d failed: %s", topic, partition, exc)
        return ErrorCode.KAFKA_STORAGE_ERROR, None, -1
    broker.kill_after_marker()
    broker.notify_append(topic, partition)
    if topic == OFFSETS_TOPIC:
        broker.groups.complete_txn_offsets(partition, producer_id, committed)
    return ErrorCode.NONE, leader, offset + 1


async def handle(broker, request, header) -> dict:
    # Kafka: Alter on the cluster (an admin aborting a hanging transaction), else ClusterAction (a coordinator)
    authorizer = broker.authorizer
    allowed = (authorizer.authorize(header, "Alter", CLUSTER, CLUSTER_NAME, log_denied=False)
               or authorizer.authorize(header, "ClusterAction", CLUSTER, CLUSTER_NAME))
    now = clock.wall_ms()
    results = []
    waits = []  # acks=all: (partition, offset its high watermark must reach, leader epoch, its result)
    for marker in request["markers"]:
        topics = []
        for t in marker["topics"]:
            partitions = []
            for p in t["partition_indexes"]:
                error, appended_to, end = (_write(broker, t["name"], p, marker, now) if allowed
                                           else (ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None, -1))
                partitions.append({"partition_index": p, "error_code": error})
                if appended_to is not None:
                    waits.append((appended_to, end, appended_to.leader_epoch, partitions[-1]))
            topics.append({"name": t["name"], "partitions": partitions})
        results.append({"producer_id": marker["producer_id"], "topics": topics})
    timeout_s = broker.config["request.timeout.ms"] / 1000
    errors = await asyncio.gather(*(partition.wait_for_replication(end, epoch, timeout_s)
                                    for partition, end, epoch, _ in waits))
    for (_, _, _, result), error in zip(waits, errors, strict=False):
        result["error_code"] = error
    return {"markers": results}
