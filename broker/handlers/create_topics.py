"""CreateTopics: new topics on this single broker (replication factor 1)."""

import logging

from broker import topic_configs
from broker.broker import InvalidTopic
from broker.client_quotas import QUOTA_EXCEEDED, ControllerMutations
from broker.errors import ErrorCode
from storage.catalog import validate_topic_name
from storage.errors import TopicExists

API = "CreateTopics"
VERSIONS = (2, 7)

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
    configs = {c["name"]: c["value"] for c in want["configs"] if c["value"] is not None}
    problem = topic_configs.validate(configs, broker.logs.default_config)
    if broker.logs.topic(name) is not None:
        result.update(error_code=ErrorCode.TOPIC_ALREADY_EXISTS, error_message=f"topic {name} already exists")
    elif count <= 0 or want["assignments"]:
        result.update(error_code=ErrorCode.INVALID_PARTITIONS, error_message="partition count must be positive")
    elif want["replication_factor"] not in (-1, 1):
        result.update(error_code=ErrorCode.INVALID_REPLICATION_FACTOR,
                      error_message="replication factor must be 1 on a single broker")
    elif problem:
        result.update(error_code=ErrorCode.INVALID_CONFIG, error_message=problem)
    else:
        try:
            if validate_only:
                validate_topic_name(name)
                topic_id = None
            else:
                topic_id = (await broker.create_topic(name, count, configs)).topic_id
        except InvalidTopic as exc:
            result.update(error_code=ErrorCode.INVALID_TOPIC_EXCEPTION, error_message=str(exc))
        except TopicExists as exc:  # another request is creating it right now
            result.update(error_code=ErrorCode.TOPIC_ALREADY_EXISTS, error_message=str(exc))
        except OSError as exc:  # nothing of the topic is left behind
            log.error("could not create topic %s: %s", name, exc)
            result.update(error_code=ErrorCode.KAFKA_STORAGE_ERROR, error_message=f"could not create the topic: {exc}")
        else:
            result.update(topic_id=topic_id, num_partitions=count, replication_factor=1, configs=[])
            if not validate_only:
                log.info("created topic %s: %d partitions, configs %s", name, count, configs or "default")
    return result


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
        result = await _create(broker, want, request["validate_only"])
        if not result["error_code"] and not request["validate_only"]:
            mutations.record(result["num_partitions"])
        results.append(result)
    return {"throttle_time_ms": mutations.throttle_ms, "topics": results}
