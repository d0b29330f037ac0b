"""CreatePartitions: grow a topic's partition count; new replicas assigned like CreateTopics'."""

import logging

from broker.cluster.metadata import InvalidReplicaAssignment, InvalidReplicationFactor, TopicChangeInProgress
from broker.errors import ErrorCode
from broker.handlers import Api
from broker.network.client_quotas import QUOTA_EXCEEDED, ControllerMutations
from broker.security.authorization import IN_HANDLER
from broker.security.authorizer import TOPIC
from storage.errors import TopicExists

from .create_topics import MAX_PARTITIONS_PER_REQUEST

API = Api("CreatePartitions", (0, 3), acl=IN_HANDLER)

log = logging.getLogger("moldau.create_partitions")


async def _grow(broker, header, want: dict, validate_only: bool, mutations: ControllerMutations) -> dict:
    name, count = want["name"], want["count"]
    if not broker.authorizer.authorize(header, "Alter", TOPIC, name):
        return {"name": name, "error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED, "error_message": None}
    topic = broker.store.topic(name)
    if topic is None:
        return {"name": name, "error_code": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "error_message": None}
    if count <= topic.num_partitions:
        return {"name": name, "error_code": ErrorCode.INVALID_PARTITIONS,
                "error_message": f"topic has {topic.num_partitions} partitions; {count} is not more"}
    if mutations.refused():
        return {"name": name, "error_code": ErrorCode.THROTTLING_QUOTA_EXCEEDED, "error_message": QUOTA_EXCEEDED}
    state = broker.store.cache.partition_state(name, 0)
    explicit = {topic.num_partitions + i: list(a["broker_ids"]) for i, a in enumerate(want["assignments"] or ())}
    try:
        plan = broker.store.plan_replicas(count - topic.num_partitions, len(state.replicas) if state else -1,
                                          explicit or None, first_partition=topic.num_partitions)
        if not validate_only:
            await broker.store.create_partitions(name, plan)
    except InvalidReplicationFactor as exc:
        return {"name": name, "error_code": ErrorCode.INVALID_REPLICATION_FACTOR, "error_message": str(exc)}
    except InvalidReplicaAssignment as exc:
        return {"name": name, "error_code": ErrorCode.INVALID_REPLICA_ASSIGNMENT, "error_message": str(exc)}
    except TopicExists as exc:  # another request changed it
        return {"name": name, "error_code": ErrorCode.REASSIGNMENT_IN_PROGRESS, "error_message": str(exc)}
    except TopicChangeInProgress as exc:  # retriable, as Kafka's answer for a growth not done in time
        return {"name": name, "error_code": ErrorCode.REQUEST_TIMED_OUT, "error_message": str(exc)}
    except OSError as exc:  # nothing of the new partitions is left behind
        log.error("could not add partitions to %s: %s", name, exc)
        return {"name": name, "error_code": ErrorCode.KAFKA_STORAGE_ERROR, "error_message": str(exc)}
    if not validate_only:
        mutations.record(count - topic.num_partitions)
        log.info("topic %s grown from %d to %d partitions", name, topic.num_partitions, count)
    return {"name": name, "error_code": 0, "error_message": None}


def _added(broker, want: dict) -> int:
    topic = broker.store.topic(want["name"])
    return max(want["count"] - topic.num_partitions, 0) if topic else 0


async def handle(broker, request, header) -> dict:
    topics = request["topics"]
    if sum(_added(broker, t) for t in topics) > MAX_PARTITIONS_PER_REQUEST:
        return {"throttle_time_ms": 0, "results": [
            {"name": t["name"], "error_code": ErrorCode.POLICY_VIOLATION,
             "error_message": "Unable to perform excessively large batch operation."} for t in topics]}
    mutations = ControllerMutations(broker.quotas, header, strict=header.api_version >= 3)
    results = [await _grow(broker, header, t, request["validate_only"], mutations) for t in topics]
    return {"throttle_time_ms": mutations.throttle_ms, "results": results}
