"""Fetch: hand stored batches back as they lie in the segment files.

The request's partitions are a map (broker/fetch/log_read.py), read through a fetch
session context (broker/fetch/fetch_session.py: full, incremental or sessionless,
KIP-227). A fetch that finds less than min_bytes parks in the fetch
purgatory (broker/fetch/delayed_fetch.py) until appends bring enough or
max_wait_ms passes, and is dropped if its connection closes first.

Consumers read below the high watermark; read_committed fetches get nothing
at or past the last stable offset, and the aborted transactions among what
they get, whose records the client drops. Only the leader serves a partition
(NOT_LEADER_OR_FOLLOWER elsewhere; current_leader_epoch checked, KIP-320). A
follower (ReplicaState's replica id, v15+) reads up to the log end; its fetch
offset tells the leader how far it has replicated, and a last_fetched_epoch
that disagrees with the leader's epochs gets a diverging epoch back instead
of records, to truncate to (KIP-595's form of KIP-101/279).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping

from broker.cluster import stages
from broker.errors import ErrorCode
from broker.fetch.delayed_fetch import DelayedFetch
from broker.fetch.fetch_session import FINAL_EPOCH, FetchContext, FetchSession, new_context
from broker.fetch.log_read import (
    FOLLOWER,
    READ_COMMITTED,
    FetchPartition,
    PartitionData,
    TopicPartition,
    find_log,
    read_from_logs,
)
from broker.handlers import Api
from broker.security.authorization import IN_HANDLER
from broker.security.authorizer import TOPIC
from protocol.fetch_answers import nothing_to_return
from storage import clock


def replica_id_of(request) -> int:
    state = request.get("replica_state")
    return state["replica_id"] if state else request["replica_id"]


API = Api("Fetch", (4, 17), acl=IN_HANDLER, follower_id=replica_id_of, parked=True)

TOPIC_IDS_SINCE = 13  # v13+ names topics by id
_NO_TOPIC_ID = uuid.UUID(int=0)
_TOPIC_DENIED = PartitionData(ErrorCode.TOPIC_AUTHORIZATION_FAILED)


def requested_partitions(store, request, uses_topic_ids: bool) -> dict[TopicPartition, FetchPartition]:
    """The request's partitions as a map: one entry per partition, the last one named wins. A topic id
    is resolved to its name now: a session keeps that name for the partitions it is not told again."""
    wanted: dict[TopicPartition, FetchPartition] = {}
    for want in request["topics"]:
        topic = want["topic_id"] if uses_topic_ids else want["topic"]
        found = store.topic_by_id(topic) if uses_topic_ids else None
        name = found.name if found is not None else None
        for p in want["partitions"]:
            wanted[TopicPartition(topic, p["partition"])] = FetchPartition(
                p["fetch_offset"], p["partition_max_bytes"], p["log_start_offset"], p["current_leader_epoch"],
                p.get("last_fetched_epoch", -1), name)
    return wanted


def diverging_epoch(log_, last_fetched_epoch: int, fetch_offset: int) -> dict | None:
    """Where a follower's log parts from this one, if its last fetched epoch says it does."""
    if last_fetched_epoch < 0:
        return None
    cache = log_.leader_epochs
    epoch, end = cache.end_offset_for(last_fetched_epoch, log_.log_end_offset)
    if epoch == last_fetched_epoch and end >= fetch_offset:
        return None
    if epoch < 0:  # no epoch known here (an empty log): the follower keeps what this log has
        end = log_.log_end_offset
    return {"epoch": epoch, "end_offset": end}


def leadership_answers(broker, partitions: Mapping[TopicPartition, FetchPartition], replica_id: int,
                       session: FetchSession | None = None) -> dict[TopicPartition, PartitionData]:
    """The answers of partitions not to read: not led here, a current_leader_epoch that is not the
    leader's, a follower whose log diverged. A follower's fetch of the others tells the leader its log end:
    every partition of its session that may have news, named in this request or not (as Kafka's leader
    does for all of them); those it caught up in and that did not change since count as fetched with each
    fetch of the ``session`` (replica_manager.py's FollowerState.settled_in)."""
    answers = {}
    for key, want in partitions.items():
        name = key.topic
        if isinstance(name, uuid.UUID):
            # resolved now: a session that first named the id before this broker knew the topic holds no name,
            # and an idle partition is never named again (its follower would leave the ISR for good)
            found = broker.store.topic_by_id(name)
            name = found.name if found is not None else want.topic_name
        if name is None or broker.store.topic(name) is None:
            continue  # read_from_logs answers UNKNOWN_TOPIC_ID / UNKNOWN_TOPIC_OR_PARTITION
        partition, error = broker.replicas.leader_partition(name, key.partition)
        if partition is not None:
            error = partition.check_epoch(want.current_leader_epoch)
        if error:
            answers[key] = PartitionData(error)
        elif replica_id >= 0:
            diverging = diverging_epoch(partition.log, want.last_fetched_epoch, want.fetch_offset)
            if diverging is not None:
                log_ = partition.log
                answers[key] = PartitionData(0, log_.high_watermark, log_.last_stable_offset,
                                             log_.log_start_offset, diverging_epoch=diverging)
            else:
                partition.follower_fetched(replica_id, want.fetch_offset, session and (session, key))
    return answers


def forgotten_partitions(request, uses_topic_ids: bool) -> list[TopicPartition]:
    return [TopicPartition(t["topic_id"] if uses_topic_ids else t["topic"], p)
            for t in request["forgotten_topics_data"] for p in t["partitions"]]


def handle(broker, request, header):
    if request["session_epoch"] == FINAL_EPOCH and replica_id_of(request) < 0:
        return _sessionless(broker, request, header)
    return _in_context(broker, request, header)


def _in_context(broker, request, header):
    uses_topic_ids = header.api_version >= TOPIC_IDS_SINCE
    context = new_context(
        broker.fetch_sessions, request["session_id"], request["session_epoch"],
        requested_partitions(broker.store, request, uses_topic_ids), forgotten_partitions(request, uses_topic_ids),
        uses_topic_ids, privileged=replica_id_of(request) >= 0, now_ms=clock.wall_ms())
    if context.error:
        return _response(broker, context, {})
    isolation = FOLLOWER if replica_id_of(request) >= 0 else request["isolation_level"]
    max_bytes = min(request["max_bytes"], broker.config["fetch.max.bytes"])
    candidates = context.candidates()
    answered = leadership_answers(broker, candidates, replica_id_of(request), context.session)
    found, total = read_from_logs(broker.logs, context.to_read(broker.logs, isolation, answered, candidates),
                                  isolation, max_bytes, answered)
    if broker.authorizer.enabled:
        _deny_unreadable(broker, request, header, found)
    if replica_id_of(request) >= 0 and stages.on():
        _mark_sent(broker, replica_id_of(request), found)
    diverged = any(a.diverging_epoch is not None for a in answered.values())
    if total >= request["min_bytes"] or request["max_wait_ms"] <= 0 or diverged:
        return _response(broker, context, found)
    delayed = DelayedFetch(broker.logs, context.partitions, context.topics, isolation, request["min_bytes"], total)
    if not delayed.topics:
        return _response(broker, context, found)
    parked = broker.fetch_purgatory.watch(delayed, request["max_wait_ms"] / 1000)
    return _complete_later(broker, context, delayed, parked, max_bytes, answered, request, header)


async def _complete_later(broker, context: FetchContext, delayed: DelayedFetch, parked, max_bytes: int,
                          answered: dict, request, header):
    await parked
    isolation = delayed.isolation
    candidates = context.candidates()
    if replica_id_of(request) < 0:  # a client's session may have more to read now (a follower's reads them all)
        answered = leadership_answers(broker, candidates, -1)
    found, _ = read_from_logs(broker.logs, context.to_read(broker.logs, isolation, answered, candidates), isolation,
                              max_bytes, answered)
    if broker.authorizer.enabled:
        _deny_unreadable(broker, request, header, found)
    if replica_id_of(request) >= 0 and stages.on():
        _mark_sent(broker, replica_id_of(request), found)
    return _response(broker, context, found)


def _mark_sent(broker, replica_id: int, found: dict[TopicPartition, PartitionData]) -> None:
    for key, data in found.items():
        if data.records:
            topic = broker.logs.topic_by_id(key.topic) if isinstance(key.topic, uuid.UUID) else None
            stages.mark("sent", topic.name if topic else key.topic, key.partition, stages.records_end(data.records),
                        replica_id)


def _deny_unreadable(broker, request, header, found: dict[TopicPartition, PartitionData]) -> None:
    """A consumer needs Read on each topic; a follower (replica id set) ClusterAction on the cluster."""
    authorizer = broker.authorizer
    follower = replica_id_of(request) >= 0
    if follower and authorizer.authorize_cluster(header, "ClusterAction"):
        return
    for key in found:
        topic = broker.logs.topic_by_id(key.topic) if isinstance(key.topic, uuid.UUID) else None
        name = topic.name if topic is not None else key.topic
        if isinstance(name, str) and (follower or not authorizer.authorize(header, "Read", TOPIC, name)):
            found[key] = _TOPIC_DENIED


def _response(broker, context: FetchContext, found: dict[TopicPartition, PartitionData]) -> dict:
    session_id, listed = context.respond(found, clock.wall_ms(), broker.logs)
    responses = []
    last = partitions = None
    for key, data in listed.items():
        if key.topic != last:  # consecutive partitions of a topic share an entry
            last, partitions = key.topic, []
            responses.append(_topic_response(key.topic, partitions))
        partitions.append(_partition_response(key.partition, data))
    return {"throttle_time_ms": 0, "error_code": context.error, "session_id": session_id, "responses": responses}


def _topic_response(topic: str | uuid.UUID, partitions: list) -> dict:
    by_id = isinstance(topic, uuid.UUID)
    return {"topic": "" if by_id else topic, "topic_id": topic if by_id else _NO_TOPIC_ID, "partitions": partitions}


def _partition_response(index: int, data: PartitionData) -> dict:
    return {
        "partition_index": index,
        "error_code": data.error,
        "high_watermark": data.high_watermark,
        "last_stable_offset": data.last_stable_offset,
        "log_start_offset": data.log_start_offset,
        "aborted_transactions": data.aborted_transactions,
        "preferred_read_replica": -1,
        "records": data.records,
        "diverging_epoch": data.diverging_epoch,
    }


# --- a consumer's fetch without a session ---------------------------------------------------------------------
# librdkafka never opens a fetch session, so each of its fetches names every partition it consumes. Those with
# nothing to return (led here, the consumer at the high watermark) are answered from broker.idle_answers, kept
# encoded, with no read and no per-partition objects; the others are read as any fetch's partitions are.


def _sessionless(broker, request, header):
    if request["session_id"]:  # a final fetch closes the session it names (Kafka's FetchManager.newContext)
        broker.fetch_sessions.remove(request["session_id"])
    response, total = _sessionless_read(broker, request, header)
    if response is None:  # a partition named twice: the map's rules (broker/fetch/log_read.py) apply
        return _in_context(broker, request, header)
    if total >= request["min_bytes"] or request["max_wait_ms"] <= 0:
        return response
    wanted = _RequestedPartitions(broker.logs, request, header.api_version >= TOPIC_IDS_SINCE)
    delayed = DelayedFetch(broker.logs, wanted, wanted.topics, request["isolation_level"], request["min_bytes"],
                           total)
    if not delayed.topics:
        return response
    parked = broker.fetch_purgatory.watch(delayed, request["max_wait_ms"] / 1000)
    return _sessionless_later(broker, request, header, parked)


class _RequestedPartitions(Mapping):
    """A parked sessionless fetch's partitions, as the purgatory looks them up: mapped only when an append to
    one of its topics first asks (an idle consumer's long poll mostly ends unasked, at max_wait_ms)."""

    def __init__(self, logs, request, uses_topic_ids: bool) -> None:
        self._logs, self._request, self._uses_topic_ids = logs, request, uses_topic_ids
        self._mapped: dict[TopicPartition, FetchPartition] | None = None
        self.topics = {t["topic_id"] if uses_topic_ids else t["topic"] for t in request["topics"]}

    def _partitions(self) -> dict[TopicPartition, FetchPartition]:
        if self._mapped is None:
            self._mapped = requested_partitions(self._logs, self._request, self._uses_topic_ids)
        return self._mapped

    def __getitem__(self, key: TopicPartition) -> FetchPartition:
        return self._partitions()[key]

    def __iter__(self):
        return iter(self._partitions())

    def __len__(self) -> int:
        return len(self._partitions())


async def _sessionless_later(broker, request, header, parked) -> dict:
    await parked
    return _sessionless_read(broker, request, header)[0]


def _sessionless_read(broker, request, header) -> tuple[dict | None, int]:
    """(the response, bytes of records in it); (None, 0) if the request names a partition twice."""
    uses_topic_ids = header.api_version >= TOPIC_IDS_SINCE
    isolation = request["isolation_level"]
    idle = broker.idle_answers.answers
    fmt = (header.api_version, isolation == READ_COMMITTED)
    authorizer = broker.authorizer
    responses = []
    to_read: dict[TopicPartition, FetchPartition] = {}
    places: list[tuple[list, int, TopicPartition]] = []  # where the answers of partitions read go
    names = set()
    for want in request["topics"]:
        topic = want["topic_id"] if uses_topic_ids else want["topic"]
        wanted = want["partitions"]
        if topic in names or len({p["partition"] for p in wanted}) != len(wanted):
            return None, 0
        names.add(topic)
        found = broker.logs.topic_by_id(topic) if uses_topic_ids else broker.logs.topic(topic)
        name = found.name if found is not None else None
        if name is not None and authorizer.enabled and not authorizer.authorize(header, "Read", TOPIC, name):
            name = None  # refused as the reads' answers are
        partitions = []
        responses.append(_topic_response(topic, partitions))
        for p in wanted:
            index, offset, epoch = p["partition"], p["fetch_offset"], p["current_leader_epoch"]
            if name is not None:
                answer = idle.get((name, index))
                if answer is None or answer.high_watermark != offset:
                    answer = _idle_answer(broker, name, topic, index, offset)
                if answer is not None and (epoch < 0 or epoch == answer.leader_epoch):
                    encoded = answer.encoded.get(fmt)
                    if encoded is None:
                        encoded = answer.encoded[fmt] = nothing_to_return(
                            header.api_version, fmt[1], index, answer.high_watermark, answer.last_stable_offset,
                            answer.log_start_offset)
                    partitions.append(encoded)
                    continue
            key = TopicPartition(topic, index)
            to_read[key] = FetchPartition(offset, p["partition_max_bytes"], p["log_start_offset"], epoch,
                                          p["last_fetched_epoch"], name if uses_topic_ids else None)
            places.append((partitions, len(partitions), key))
            partitions.append(None)
    total = 0
    if to_read:
        max_bytes = min(request["max_bytes"], broker.config["fetch.max.bytes"])
        answered = leadership_answers(broker, to_read, -1)
        found_data, total = read_from_logs(broker.logs, to_read, isolation, max_bytes, answered)
        if authorizer.enabled:
            _deny_unreadable(broker, request, header, found_data)
        for partitions, i, key in places:
            partitions[i] = _partition_response(key.partition, found_data[key])
    return {"throttle_time_ms": 0, "error_code": 0, "session_id": 0, "responses": responses}, total


def _idle_answer(broker, name: str, topic, index: int, offset: int):
    """The partition's IdleAnswer if this broker leads it and ``offset`` is its high watermark, else None."""
    log_, _ = find_log(broker.logs, TopicPartition(topic, index), name)
    if log_ is None or log_.high_watermark != offset:
        return None
    partition, error = broker.replicas.leader_partition(name, index)
    if error:
        return None
    return broker.idle_answers.remember(name, log_, partition.leader_epoch)
