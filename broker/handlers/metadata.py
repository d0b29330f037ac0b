"""Metadata: brokers, topics and partition leaders; may auto-create topics.

The topics asked for are a set, as in Kafka: a name (or id) listed many times is answered once.
Auto-creation is bounded like CreateTopics (MAX_PARTITIONS_PER_REQUEST partitions a request; the
names past it are UNKNOWN_TOPIC_OR_PARTITION, which clients retry) and done in steps, so a request
naming thousands of unknown topics does not stall everyone else. A request naming more than STEP
topics is answered STEP topics at a time, other connections served in between (a million names take
seconds).

Answers are encoded once and kept (cluster/metadata.py's MetadataAnswers): Metadata for all of 10,000 partitions builds
10,000 entries and encodes them (a quarter of a second of Python), and clients ask again and again. A kept
answer is for one (version, listener, topic set, flags) and stands while the partition states
(MetadataCache.revision), the live brokers, the controller and its topics (name, id, partition count)
stay as they were; with ACLs on, answers depend on the principal and are not kept.
"""

import asyncio
import uuid

from broker.coordinator.internal_topics import INTERNAL_TOPICS
from broker.errors import ErrorCode
from broker.handlers import Api
from broker.security.authorization import IN_HANDLER
from broker.security.authorizer import CLUSTER, CLUSTER_NAME, TOPIC
from protocol.frames import Encoded, encode_body
from storage.errors import InvalidTopic

from .create_topics import MAX_PARTITIONS_PER_REQUEST

API = Api("Metadata", (0, 12), acl=IN_HANDLER)

ZERO_UUID = uuid.UUID(int=0)
NOT_REQUESTED = -2147483648  # authorized operations nobody asked for
STEP = 10_000
ENCODE_IN_THREAD = 2_000  # an answer of more partitions is encoded on a worker thread, other requests served meanwhile


def _topic_entry(broker, header, request, topic) -> dict:
    if not broker.authorizer.authorize(header, "Describe", TOPIC, topic.name):
        return _error_entry(topic.name, ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    include = header.api_version >= 8 and request["include_topic_authorized_operations"]
    return {
        "error_code": 0,
        "name": topic.name,
        "topic_id": topic.topic_id,
        "is_internal": topic.name in INTERNAL_TOPICS,
        "partitions": broker.partition_metadata(topic),
        "topic_authorized_operations":
            broker.authorizer.authorized_operations(header, TOPIC, topic.name) if include else NOT_REQUESTED,
    }


def _error_entry(name, code, topic_id=None) -> dict:
    return {"error_code": code, "name": name, "topic_id": topic_id, "partitions": []}


def _entry(broker, header, request, want: dict, invalid: set[str]) -> dict:
    # v10+: a non-zero topic id asks by id, whatever the name says (as in Kafka):
    # the Java admin's describeTopics by id sends the name "", not null
    if want["topic_id"] != ZERO_UUID:
        topic = broker.store.topic_by_id(want["topic_id"])
        return _topic_entry(broker, header, request, topic) if topic else _error_entry(None, ErrorCode.UNKNOWN_TOPIC_ID, want["topic_id"])
    name = want["name"]
    if name in invalid:
        return _error_entry(name, ErrorCode.INVALID_TOPIC_EXCEPTION)
    topic = broker.store.topic(name)
    if topic is None and not broker.authorizer.authorize(header, "Describe", TOPIC, name):
        return _error_entry(name, ErrorCode.TOPIC_AUTHORIZATION_FAILED)  # whether it exists is not told either
    if topic is None:  # LEADER_NOT_AVAILABLE: a cluster is creating it (clients retry either)
        creating = broker.store.topic_creation_pending(name)
        return _error_entry(name, ErrorCode.LEADER_NOT_AVAILABLE if creating else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    return _topic_entry(broker, header, request, topic)


def _unique(wanted: list[dict], seen: dict | None = None) -> list[dict]:
    """The topics asked for, each once, in the order first asked (``seen``: those of earlier steps)."""
    seen = {} if seen is None else seen
    for want in wanted:
        seen.setdefault(want["name"] if want["topic_id"] == ZERO_UUID else want["topic_id"], want)
    return list(seen.values())


def _response(broker, header, request, topics: list[dict]) -> dict:
    return {
        "throttle_time_ms": 0,
        "brokers": broker.brokers(header),
        "cluster_id": broker.cluster_id,
        "controller_id": broker.store.cache.controller_id,
        "topics": topics,
        "cluster_authorized_operations":
            broker.authorizer.authorized_operations(header, CLUSTER, CLUSTER_NAME)
            if 8 <= header.api_version <= 10 and request["include_cluster_authorized_operations"]
            else NOT_REQUESTED,
    }


async def _auto_create(broker, names: list[str]) -> set[str]:
    """Create these topics; the names that are not valid topic names."""
    invalid = set()
    for name in names[: MAX_PARTITIONS_PER_REQUEST // broker.config["num.partitions"]]:
        try:
            await broker.auto_create(name)
        except InvalidTopic:
            invalid.add(name)
    return invalid


def _to_create(broker, header, request, wanted: list[dict]) -> list[str]:
    return [w["name"] for w in wanted if w["topic_id"] == ZERO_UUID and broker.store.topic(w["name"]) is None
            and broker.may_auto_create(w["name"], request["allow_auto_topic_creation"])
            and _may_create(broker, header, w["name"])]


async def _create_then_answer(broker, header, request, wanted: list[dict], names: list[str]) -> dict:
    invalid = await _auto_create(broker, names)
    return _response(broker, header, request, [_entry(broker, header, request, want, invalid) for want in wanted])


async def _answer_in_steps(broker, header, request, wanted: list[dict]) -> dict:
    seen = {}
    for start in range(0, len(wanted), STEP):
        _unique(wanted[start:start + STEP], seen)
        await asyncio.sleep(0)
    wanted = list(seen.values())
    steps = range(0, len(wanted), STEP)
    names = []
    for start in steps:
        names += _to_create(broker, header, request, wanted[start:start + STEP])
        await asyncio.sleep(0)
    invalid = await _auto_create(broker, names)
    topics = []
    for start in steps:
        topics += [_entry(broker, header, request, want, invalid) for want in wanted[start:start + STEP]]
        await asyncio.sleep(0)
    return _response(broker, header, request, topics)


def _made_from(broker, header, topics) -> tuple:
    """What an answer about ``topics`` depends on besides the request (cheap: no partition is looked at)."""
    return (broker.store.cache.revision, broker.store.cache.controller_id,
            tuple(tuple(b.values()) for b in broker.brokers(header)),
            tuple((t.name, t.topic_id, t.num_partitions) for t in topics))


def _kept_or_made(broker, header, request, key: tuple, topics: list):
    """The answer about ``topics`` (all known), kept or made now and kept."""
    made_from = _made_from(broker, header, topics)
    throttled = header.api_version >= 3
    kept = broker.metadata_answers.get(key, made_from)
    if kept is not None:
        return Encoded(kept, throttled)  # (its own throttle time: the sender may set it)
    body = _response(broker, header, request, [_topic_entry(broker, header, request, t) for t in topics])
    if sum(t.num_partitions for t in topics) < ENCODE_IN_THREAD:
        answer = encode_body(API.name, header.api_version, body, throttled)
        broker.metadata_answers.put(key, made_from, answer.data)
        return answer

    async def encoded():
        answer = await asyncio.get_running_loop().run_in_executor(None, encode_body, API.name, header.api_version,
                                                                  body, throttled)
        broker.metadata_answers.put(key, made_from, answer.data)
        return answer

    return encoded()


def _request_key(header, request, wanted) -> tuple:
    return (header.api_version, header.session.listener.name if header.session is not None else None,
            header.api_version >= 8 and request["include_topic_authorized_operations"],
            8 <= header.api_version <= 10 and request["include_cluster_authorized_operations"],
            None if wanted is None else tuple(w["name"] if w["topic_id"] == ZERO_UUID else w["topic_id"]
                                              for w in wanted))


def handle(broker, request, header):
    wanted = request["topics"]
    if wanted is None or (header.api_version == 0 and not wanted):
        if not broker.authorizer.enabled:
            return _kept_or_made(broker, header, request, _request_key(header, request, None),
                                 list(broker.logs.topics.values()))
        # all topics: those the principal may describe
        topics = [_topic_entry(broker, header, request, t) for t in broker.store.topics.values()]
        return _response(broker, header, request, [t for t in topics if t["error_code"] == ErrorCode.NONE])
    if len(wanted) > STEP:
        return _answer_in_steps(broker, header, request, wanted)
    wanted = _unique(wanted)
    if not broker.authorizer.enabled:
        topics = [broker.logs.topic_by_id(w["topic_id"]) if w["topic_id"] != ZERO_UUID else broker.logs.topic(w["name"])
                  for w in wanted]
        if None not in topics:  # all known (an answer with errors in it is made anew)
            return _kept_or_made(broker, header, request, _request_key(header, request, wanted), topics)
    unknown = _to_create(broker, header, request, wanted)
    if unknown:
        return _create_then_answer(broker, header, request, wanted, unknown)
    return _response(broker, header, request, [_entry(broker, header, request, want, set()) for want in wanted])


def _may_create(broker, header, name: str) -> bool:
    """Auto-creation needs Create on the cluster or on the topic (and Describe, to be told about it)."""
    authorizer = broker.authorizer
    return (authorizer.authorize(header, "Create", CLUSTER, CLUSTER_NAME)
            or authorizer.authorize(header, "Create", TOPIC, name))
