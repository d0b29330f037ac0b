"""Produce: validate each partition's batch and append it as it came (recompressed first when the
topic's compression.type names a codec other than the batch's, as Kafka's LogValidator does).

Each partition's records hold exactly one batch (Kafka's rule from Produce v3
on: no client sends more, and every check below is per batch). A
transactional batch is taken only for a partition of the producer's open
transaction: the transaction coordinator is asked first (KIP-890), so that
nothing is written where no marker would follow -- over the network when
another broker coordinates the id (TransactionVerifier), once per
transaction and partition. From v12 (transaction version 2) the coordinator
adds the partition to the transaction instead.

Only the partition's leader appends (NOT_LEADER_OR_FOLLOWER elsewhere); it
stamps its leader epoch into the batch. acks=all needs min.insync.replicas in
the ISR before appending (NOT_ENOUGH_REPLICAS) and answers once the high
watermark has passed the batch -- waiting without holding up the event loop or
the connection's next requests (delayed_produce.py) -- or REQUEST_TIMED_OUT at the request's timeout, or
NOT_ENOUGH_REPLICAS_AFTER_APPEND if the ISR shrank below the minimum meanwhile.
A batch with a producer id new to its user past the user's producer_ids_rate
is THROTTLING_QUOTA_EXCEEDED (client_quotas.py, KIP-936).
"""

import inspect
import logging

from broker.cluster import stages
from broker.cluster.delayed_produce import DelayedProduce
from broker.coordinator.internal_topics import INTERNAL_TOPICS
from broker.coordinator.partitions import settled
from broker.errors import ErrorCode
from broker.handlers import Api
from broker.network.client_quotas import QUOTA_EXCEEDED, ProducerIds
from broker.security.authorization import IN_HANDLER
from broker.security.authorizer import TOPIC, TRANSACTIONAL_ID
from protocol.compression import CODECS
from protocol.errors import CorruptRecord
from protocol.records import (
    NO_PRODUCER_ID,
    BatchHeader,
    iter_records,
    parse_produce_records,
    read_header,
    recompressed,
)
from storage import clock
from storage.errors import (
    DuplicateSequence,
    InvalidProducerEpoch,
    InvalidProducerRecord,
    InvalidTopic,
    InvalidTxnState,
    OutOfOrderSequence,
    ProducerStateError,
    RecordBatchTooLarge,
)
from storage.log_manager import CREATE_STEP

API = Api("Produce", (3, 12), acl=IN_HANDLER)
ADDS_PARTITIONS_SINCE = 12  # transaction version 2: the write adds its partition to the transaction

# Coordinator answers that pass: Kafka turns them into one every client retries without a metadata refresh.
_RETRIABLE_TXN_ERRORS = {ErrorCode.CONCURRENT_TRANSACTIONS, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                         ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR}

log = logging.getLogger("moldau.produce")

_PRODUCER_STATE_ERRORS = {
    InvalidProducerRecord: ErrorCode.INVALID_RECORD,
    OutOfOrderSequence: ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
    InvalidProducerEpoch: ErrorCode.INVALID_PRODUCER_EPOCH,
    DuplicateSequence: ErrorCode.DUPLICATE_SEQUENCE_NUMBER,
    InvalidTxnState: ErrorCode.INVALID_TXN_STATE,
}


def _partition_result(index, code, base_offset=-1, append_time=-1, log_start=-1, message=None) -> dict:
    return {
        "index": index,
        "error_code": code,
        "base_offset": base_offset,
        "log_append_time_ms": append_time,
        "log_start_offset": log_start,
        "record_errors": [],
        "error_message": message,
    }


def _verify_transaction(broker, transactional_id: str | None, hdr: BatchHeader, tp: tuple[str, int],
                        adds_partition: bool, log_, verdicts: dict) -> ErrorCode:
    """The coordinator's word on the partition: asked here when this broker coordinates the id, else
    over the network before (``verdicts``) -- once per transaction and partition, as in Kafka."""
    coordinator = broker.transactions
    if tp in verdicts:
        error = verdicts[tp]
    elif adds_partition or broker.txn_verifier.is_remote(transactional_id):
        # verified (or added) when its transaction began here; if it ended meanwhile, the retry is verified anew
        error = ErrorCode.NONE if _began_here(log_, hdr) else ErrorCode.CONCURRENT_TRANSACTIONS
    else:
        error = coordinator.verify_partitions(transactional_id, hdr.producer_id, hdr.producer_epoch, [tp])[tp]
    if error == ErrorCode.PRODUCER_FENCED:
        return ErrorCode.INVALID_PRODUCER_EPOCH  # as for an idempotent producer's old epoch
    if error in _RETRIABLE_TXN_ERRORS:
        return ErrorCode.NOT_ENOUGH_REPLICAS
    return ErrorCode.INVALID_TXN_STATE if error else ErrorCode.NONE


def _timestamp_problem(config, batches, now: int) -> str | None:
    """message.timestamp.before/after.max.ms, checked on each batch's first and largest timestamp
    (its records are not decoded; their timestamps lie between these in practice)."""
    for _, hdr in batches:
        problem = (config.timestamp_out_of_range(hdr.base_timestamp, now)
                   or config.timestamp_out_of_range(hdr.max_timestamp, now))
        if problem:
            return problem
    return None


def _keyless_records(log_, records) -> list[dict]:
    """KIP-467's record_errors for a compacted topic: every record without a key, by its index in the
    batch, with Kafka's message (LogValidator refuses the batch, naming them all)."""
    message = f"Compacted topic cannot accept message without key in topic partition {log_.topic}-{log_.partition}"
    return [{"batch_index": i, "batch_index_error_message": message}
            for i, r in enumerate(iter_records(records)) if r.key is None]


def _topic_problem(broker, log_, records, hdr: BatchHeader, acks: int) -> tuple[ErrorCode, str, list] | None:
    """min.insync.replicas for acks=all, max.message.bytes, keys on compacted topics (Kafka's order); the
    last with KIP-467's record errors."""
    config = log_.config
    if acks == -1:  # only acks=all looks the ISR up: one lookup a partition less for the others
        in_sync = broker.in_sync_replicas(log_.topic, log_.partition)
        if len(in_sync) < config.min_insync_replicas:
            return ErrorCode.NOT_ENOUGH_REPLICAS, (f"{len(in_sync)} in-sync replica(s), "
                                                   f"min.insync.replicas is {config.min_insync_replicas}"), []
    if hdr.size > config.max_message_bytes:
        return (ErrorCode.MESSAGE_TOO_LARGE,
                f"batch of {hdr.size} bytes exceeds max.message.bytes {config.max_message_bytes}", [])
    if config.compact and not hdr.is_control:
        errors = _keyless_records(log_, records)
        if errors:
            shown = ", ".join(f"RecordError(batchIndex={e['batch_index']}, message='{e['batch_index_error_message']}')"
                              for e in errors[:3])
            return (ErrorCode.INVALID_RECORD, f"One or more records have been rejected due to {len(errors)} record "
                    f"errors in total, and only showing the first three errors at most: [{shown}]", errors)
    return None


def _append(broker, topic, part: dict, transactional_id: str | None, acks: int, version: int, now: int,
            waits: list, producer_ids: ProducerIds, verdicts: dict) -> dict:
    index = part["index"]
    partition, code = broker.replicas.leader_partition(topic.name, index)
    if partition is None:
        return _partition_result(index, code)
    log_ = partition.log
    records = part["records"]
    if records is None:
        return _partition_result(index, ErrorCode.CORRUPT_MESSAGE, message="null records")
    try:
        batches = parse_produce_records(records)
    except CorruptRecord as exc:
        log.info("rejected batch for %s-%d: %s", topic.name, index, exc)
        return _partition_result(index, ErrorCode.CORRUPT_MESSAGE, message=str(exc))
    if len(batches) != 1:
        log.info("refused %d batches for %s-%d in one request", len(batches), topic.name, index)
        return _partition_result(index, ErrorCode.INVALID_RECORD, message="exactly one record batch per partition")
    ((_, hdr),) = batches
    try:
        codec = CODECS.get(log_.config.compression_type)  # None: "producer", kept as it came
        if codec is not None and codec != hdr.compression and not hdr.is_control:
            records = bytearray(recompressed(records, codec))  # the log rewrites offsets in place
            batches = parse_produce_records(records)
            ((_, hdr),) = batches
        refused = _topic_problem(broker, log_, records, hdr, acks)
    except CorruptRecord as exc:
        log.info("rejected batch for %s-%d: %s", topic.name, index, exc)
        return _partition_result(index, ErrorCode.CORRUPT_MESSAGE, message=str(exc))
    if refused is not None:
        code, message, record_errors = refused
        log.info("refused batch for %s-%d: %s", topic.name, index, message)
        return dict(_partition_result(index, code, message=message), record_errors=record_errors)
    problem = _timestamp_problem(log_.config, batches, now)
    if problem:
        log.info("refused batch for %s-%d: %s", topic.name, index, problem)
        return _partition_result(index, ErrorCode.INVALID_TIMESTAMP, message=problem)
    if hdr.is_control:
        return _partition_result(index, ErrorCode.INVALID_RECORD, message="clients may not write control batches")
    if hdr.producer_id != NO_PRODUCER_ID and not producer_ids.admit(hdr.producer_id):
        return _partition_result(index, ErrorCode.THROTTLING_QUOTA_EXCEEDED, message=QUOTA_EXCEEDED)
    if hdr.is_transactional and hdr.producer_id != NO_PRODUCER_ID:
        error = _verify_transaction(broker, transactional_id, hdr, (topic.name, index),
                                    version >= ADDS_PARTITIONS_SINCE, log_, verdicts)
        if error:
            log.info("refused transactional batch of producer %d for %s-%d: %s",
                     hdr.producer_id, topic.name, index, error.name)
            return _partition_result(index, error, message="the partition is not in the producer's transaction")
    try:
        base_offset, last_offset = log_.append(records, batches, now, leader_epoch=partition.leader_epoch)
    except ProducerStateError as exc:
        log.info("refused batch for %s-%d: %s", topic.name, index, exc)
        return _partition_result(index, _PRODUCER_STATE_ERRORS[type(exc)], message=str(exc))
    except RecordBatchTooLarge as exc:
        log.info("refused batch for %s-%d: %s", topic.name, index, exc)
        return _partition_result(index, ErrorCode.RECORD_LIST_TOO_LARGE, message=str(exc))
    except OSError as exc:
        log.error("append to %s-%d failed: %s", topic.name, index, exc)
        return _partition_result(index, ErrorCode.KAFKA_STORAGE_ERROR, message=str(exc))
    broker.notify_append(topic.name, index)
    append_time = now if log_.config.log_append_time else -1
    result = _partition_result(index, ErrorCode.NONE, base_offset, append_time, log_.log_start_offset)
    if acks == -1 and partition.high_watermark <= last_offset:
        waits.append((partition, last_offset + 1, partition.leader_epoch, result))
    elif acks != 0 and not partition.epoch_checkpoint_synced():  # a leadership just taken: see wait_for_replication
        waits.append((partition, None, partition.leader_epoch, result))
    return result


def _began_here(log_, hdr: BatchHeader) -> bool:
    """Whether the producer's transaction at this epoch is open in the partition already."""
    entry = log_.producer_state.producers.get(hdr.producer_id)
    return entry is not None and entry.producer_epoch == hdr.producer_epoch and entry.current_txn_first_offset >= 0


def _to_verify(broker, request, adds: bool) -> dict[tuple[int, int], list[tuple[str, int]]]:
    """Partitions whose transactional batch begins its transaction there while another broker
    coordinates the id, or while this one does and the write adds the partition (``adds``, transaction
    version 2), by (producer id, epoch): the coordinator is asked, or adds them and its write is committed,
    before anything is appended."""
    transactional_id = request["transactional_id"]
    if transactional_id is None or not (adds or broker.txn_verifier.is_remote(transactional_id)):
        return {}
    found: dict = {}
    for topic_data in request["topic_data"]:
        for part in topic_data["partition_data"]:
            log_ = broker.logs.log(topic_data["name"], part["index"])
            try:
                hdr = read_header(part["records"]) if log_ is not None and part["records"] else None
            except CorruptRecord:
                continue  # refused when appended
            if hdr is not None and hdr.is_transactional and not _began_here(log_, hdr):
                found.setdefault((hdr.producer_id, hdr.producer_epoch), []).append((topic_data["name"], part["index"]))
    return found


async def _verified(broker, request, header, to_verify: dict):
    """The answer once the coordinator has confirmed (or added) the partitions."""
    adds = header.api_version >= ADDS_PARTITIONS_SINCE
    transactional_id = request["transactional_id"]
    remote = broker.txn_verifier.is_remote(transactional_id)
    verdicts = {}
    for (producer_id, epoch), partitions in to_verify.items():
        if remote:
            verdicts.update(await broker.txn_verifier.verify(transactional_id, producer_id, epoch, partitions, adds))
        else:
            verdicts.update(await _added_here(broker, transactional_id, producer_id, epoch, partitions))
    response = _handle(broker, request, header, verdicts)
    return await response if inspect.isawaitable(response) else response


async def _added_here(broker, transactional_id: str, producer_id: int, epoch: int,
                      partitions: list[tuple[str, int]]) -> dict[tuple[str, int], ErrorCode]:
    """Transaction version 2, coordinated here: the partitions join the transaction, and the write waits
    until that is committed in the transaction state (else a new coordinator would send the partition no
    marker) -- a delayed produce, as Kafka's verification guard, not an error its client retries."""
    coordinator = broker.transactions
    error = coordinator.add_partitions(transactional_id, producer_id, epoch, set(partitions))
    if not error:
        error = await settled(coordinator.state_manager.committed(transactional_id))
    return dict.fromkeys(partitions, error)


def handle(broker, request, header):
    to_verify = _to_verify(broker, request, header.api_version >= ADDS_PARTITIONS_SINCE)
    if to_verify:
        return _verified(broker, request, header, to_verify)
    return _handle(broker, request, header, {})


def _handle(broker, request, header, verdicts: dict):
    acks = request["acks"]
    now = clock.wall_ms()
    responses = []
    waits: list = []
    # auto-creation here runs on the event loop at once: a few partitions a request (the rest
    # UNKNOWN_TOPIC_OR_PARTITION, which clients retry after a Metadata request creates them in steps)
    creatable = CREATE_STEP
    producer_ids = ProducerIds(broker.quotas, header)
    authorizer = broker.authorizer
    txn_denied = (authorizer.enabled and request["transactional_id"] is not None
                  and not authorizer.authorize(header, "Write", TRANSACTIONAL_ID, request["transactional_id"]))
    for topic_data in request["topic_data"]:
        name = topic_data["name"]
        parts = topic_data["partition_data"]
        if authorizer.enabled and (txn_denied or not authorizer.authorize(header, "Write", TOPIC, name)):
            code = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED if txn_denied else ErrorCode.TOPIC_AUTHORIZATION_FAILED
            responses.append({"name": name, "partition_responses": [_partition_result(p["index"], code) for p in parts]})
            continue
        try:
            # the coordinators own the internal topics; clients may not write them
            if name in INTERNAL_TOPICS:
                raise InvalidTopic(f"{name} is internal")
            known = broker.store.topic(name)
            topic = known or broker.topic_for_write(name, allow_auto_create=creatable > 0)
            if topic is not None and known is None:
                creatable -= topic.num_partitions
        except InvalidTopic:
            topic, code = None, ErrorCode.INVALID_TOPIC_EXCEPTION
        else:
            code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        if acks not in (-1, 0, 1):
            code, topic = ErrorCode.INVALID_REQUIRED_ACKS, None
        if topic is None:
            results = [_partition_result(p["index"], code) for p in parts]
        else:
            results = [_append(broker, topic, p, request["transactional_id"], acks, header.api_version, now, waits,
                               producer_ids, verdicts) for p in parts]
        responses.append({"name": name, "partition_responses": results})
    response = {"responses": responses, "throttle_time_ms": producer_ids.throttle_ms}
    if header.read_at is not None and stages.on():
        stages.produce_read(response, header.read_at)
    if acks == 0:
        return None
    if waits:
        return DelayedProduce(response, waits, request["timeout_ms"])
    return response
