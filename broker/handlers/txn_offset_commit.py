"""TxnOffsetCommit: a consumer group's offsets, written inside the producer's transaction.

They are stored in __consumer_offsets at once but count only from the
transaction's commit marker on; an abort drops them. The producer must have
added the group's partition (AddOffsetsToTxn) to its open transaction; from
v5 (transaction version 2) this request adds it.
"""

from broker.coordinator.internal_topics import OFFSETS_TOPIC
from broker.coordinator.partitions import settled
from broker.errors import ErrorCode
from broker.group.metadata import CommittedOffset
from broker.handlers import Api
from broker.security.authorization import IN_HANDLER
from storage import clock

from .group_partitions import group_refusal, partition_errors, requested_partitions

API = Api("TxnOffsetCommit", (0, 5), acl=IN_HANDLER)
ADDS_PARTITION_SINCE = 5


async def _verify(broker, request, adds_partition: bool) -> ErrorCode:
    """Whether the producer's open transaction holds the group's offsets partition (adding it first):
    asked of this broker's transaction coordinator, or over the network of the one that has the id."""
    if not request["group_id"]:
        return ErrorCode.INVALID_GROUP_ID
    partition = (OFFSETS_TOPIC, broker.groups.offsets_partition(request["group_id"]))
    producer = (request["transactional_id"], request["producer_id"], request["producer_epoch"])
    if broker.txn_verifier.is_remote(request["transactional_id"]):
        error = (await broker.txn_verifier.verify(*producer, [partition], adds_partition))[partition]
    elif adds_partition:
        error = await settled(broker.transactions.committed(
            request["transactional_id"], broker.transactions.add_partitions(*producer, {partition})))
    else:
        error = broker.transactions.verify_partitions(*producer, [partition])[partition]
    # what a write of a stale epoch to the offsets partition says; clients take it as fenced
    return ErrorCode.INVALID_PRODUCER_EPOCH if error == ErrorCode.PRODUCER_FENCED else error


async def handle(broker, request, header) -> dict:
    now = clock.wall_ms()
    refusal = group_refusal(broker, header, request)
    if refusal:
        errors = {(t["name"], p["partition_index"]): refusal for t in request["topics"] for p in t["partitions"]}
        return {"throttle_time_ms": 0, "topics": partition_errors(request["topics"], errors)}
    known, errors = requested_partitions(broker, request["topics"], header)
    offsets = {
        tp: CommittedOffset(p["committed_offset"], p["committed_leader_epoch"], p["committed_metadata"] or "", now)
        for tp, p in known
    }
    if offsets:
        error = await _verify(broker, request, header.api_version >= ADDS_PARTITION_SINCE)
        if error:
            errors.update(dict.fromkeys(offsets, error))
        else:
            committed = broker.groups.commit_txn_offsets(
                request["group_id"], request["producer_id"], request["producer_epoch"], request["member_id"],
                request["group_instance_id"], request["generation_id"], offsets)
            if ErrorCode.NONE in committed.values():  # answered once the commit is committed (acks=all)
                error = await settled(broker.groups.committed(request["group_id"]))
                committed = {tp: e or error for tp, e in committed.items()}
            errors.update(committed)
    return {"throttle_time_ms": 0, "topics": partition_errors(request["topics"], errors)}
