"""CreateTopics: replicas assigned by the metadata store (spread over the live brokers) or given
explicitly by the request; INVALID_REPLICATION_FACTOR when there are too few brokers."""

import logging
import uuid

from broker.cluster.metadata import InvalidReplicaAssignment, InvalidReplicationFactor, TopicChangeInProgress
from broker.config import topic_configs
from broker.errors import ErrorCode
from broker.handlers import Api
from broker.handlers.describe_configs import topic_entries
from broker.network.client_quotas import QUOTA_EXCEEDED, ControllerMutations
from broker.security.authorization import IN_HANDLER
from broker.security.authorizer import TOPIC
from storage.catalog import TopicMetadata, validate_topic_name
from storage.errors import InvalidTopic, TopicExists

API = Api("CreateTopics", (2, 7), acl=IN_HANDLER)

log = logging.getLogger("moldau.create_topics")

# Kafka's controller refuses requests for more partitions than this (MAX_PARTITIONS_PER_BATCH); here it
# also bounds how long one request keeps the broker creating directories instead of serving clients
MAX_PARTITIONS_PER_REQUEST = 10_000


async def _create(broker, want: dict, validate_only: bool) -> dict:
    name = want["name"]
    result = {"name": name, "topic_id": None, "error_code": 0, "error_message": None,
              "num_partitions": -1, "replication_factor": -1, "configs": None}
    count = want["num_partitions"]
    if count == -1:
        count = broker.config["num.partitions"]
    assignment = {a["partition_index"]: list(a["broker_ids"]) for a in want["assignments"] or ()}
    configs = {c["name"]: c["value"] for c in want["configs"] if c["value"] is not None}
    problem = topic_configs.validate(configs, broker.logs.default_config)
    if broker.store.topic(name) is not None:
        result.update(error_code=ErrorCode.TOPIC_ALREADY_EXISTS, error_message=f"topic {name} already exists")
    elif assignment and (want["num_partitions"] != -1 or want["replication_factor"] != -1):
        result.update(error_code=ErrorCode.INVALID_REQUEST,
                      error_message="both replica assignments and a partition count or replication factor")
    elif count <= 0 and not assignment:
        result.update(error_code=ErrorCode.INVALID_PARTITIONS, error_message="partition count must be positive")
    elif problem:
        result.update(error_code=ErrorCode.INVALID_CONFIG, error_message=problem)
    else:
        try:
            validate_topic_name(name)
            plan = broker.store.plan_replicas(count, want["replication_factor"], assignment or None)
            topic_id = None
            if not validate_only:
                topic_id = (await broker.store.create_topic(name, plan, configs)).topic_id
        except InvalidTopic as exc:
            result.update(error_code=ErrorCode.INVALID_TOPIC_EXCEPTION, error_message=str(exc))
        except TopicExists as exc:  # another request created it meanwhile
            result.update(error_code=ErrorCode.TOPIC_ALREADY_EXISTS, error_message=str(exc))
        except TopicChangeInProgress as exc:  # retriable, as Kafka's answer for a create not done in time
            result.update(error_code=ErrorCode.REQUEST_TIMED_OUT, error_message=str(exc))
        except InvalidReplicationFactor as exc:
            result.update(error_code=ErrorCode.INVALID_REPLICATION_FACTOR, error_message=str(exc))
        except InvalidReplicaAssignment as exc:
            result.update(error_code=ErrorCode.INVALID_REPLICA_ASSIGNMENT, error_message=str(exc))
        except OSError as exc:  # nothing of the topic is left behind
            log.error("could not create topic %s: %s", name, exc)
            result.update(error_code=ErrorCode.KAFKA_STORAGE_ERROR, error_message=f"could not create the topic: {exc}")
        else:
            result.update(topic_id=topic_id, num_partitions=len(plan), replication_factor=len(plan[min(plan)]),
                          configs=_created_configs(broker, name, len(plan), configs))
            if not validate_only:
                log.info("created topic %s: %d partitions, configs %s", name, count, configs or "default")
    return result


def _created_configs(broker, name: str, partitions: int, configs: dict[str, str]) -> list[dict]:
    """The topic's configs as DescribeConfigs would give them, for the answer (KIP-525)."""
    topic = TopicMetadata(name, uuid.UUID(int=0), partitions, configs)
    return [{k: e[k] for k in ("name", "value", "read_only", "config_source", "is_sensitive")}
            for e in topic_entries(broker, topic)]


def _refused(want: dict, code=ErrorCode.POLICY_VIOLATION,
             message="Excessively large number of partitions per request.") -> dict:
    return {"name": want["name"], "topic_id": None, "error_code": code, "error_message": message,
            "num_partitions": -1, "replication_factor": -1, "configs": None}


async def handle(broker, request, header) -> dict:
    topics = request["topics"]
    default = broker.config["num.partitions"]
    total = sum(default if t["num_partitions"] == -1 else max(t["num_partitions"], 0) for t in topics)
    if total > MAX_PARTITIONS_PER_REQUEST:
        return {"throttle_time_ms": 0, "topics": [_refused(t) for t in topics]}
    mutations = ControllerMutations(broker.quotas, header, strict=header.api_version >= 6)
    results = []
    for want in topics:
        if mutations.refused():
            results.append(_refused(want, ErrorCode.THROTTLING_QUOTA_EXCEEDED, QUOTA_EXCEEDED))
            continue
        if not (broker.authorizer.authorize_cluster(header, "Create")
                or broker.authorizer.authorize(header, "Create", TOPIC, want["name"])):
            results.append(_refused(want, ErrorCode.TOPIC_AUTHORIZATION_FAILED, None))
            continue
        result = await _create(broker, want, request["validate_only"])
        if not result["error_code"] and not request["validate_only"]:
            mutations.record(result["num_partitions"])
        if not result["error_code"] and not broker.authorizer.authorize(header, "DescribeConfigs", TOPIC,
                                                                        want["name"], log_denied=False):
            # as Kafka: created, but what it was created with is for those who may describe its configs
            result.update(topic_config_error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, topic_id=None,
                          num_partitions=-1, replication_factor=-1, configs=None)
        results.append(result)
    return {"throttle_time_ms": mutations.throttle_ms, "topics": results}
