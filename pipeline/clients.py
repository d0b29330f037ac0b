"""librdkafka clients for the pipeline, configured from Spark-style options.

Spark's own Kafka connector takes client settings as ``kafka.``-prefixed
options (``kafka.bootstrap.servers``, ``kafka.isolation.level``); the
``moldau`` source and sink take the same options and hand them, prefix
removed, to confluent-kafka, so one options dict configures either format.
"""

from __future__ import annotations

from collections.abc import Mapping

from confluent_kafka import IsolationLevel, KafkaError, KafkaException, Producer, TopicCollection, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

PREFIX = "kafka."
TIMEOUT_S = 30.0


def client_conf(options: Mapping[str, str]) -> dict[str, str]:
    """The ``kafka.*`` options as a librdkafka config."""
    conf = {k[len(PREFIX):]: v for k, v in options.items() if k.lower().startswith(PREFIX)}
    if "bootstrap.servers" not in conf:
        raise ValueError("option kafka.bootstrap.servers is required")
    return conf


def isolation(conf: Mapping[str, str]) -> IsolationLevel:
    """read_committed unless the options say otherwise (Spark's Kafka source defaults the other way)."""
    level = conf.get("isolation.level", "read_committed")
    return IsolationLevel.READ_COMMITTED if level == "read_committed" else IsolationLevel.READ_UNCOMMITTED


def topic_partitions(admin: AdminClient, topic: str) -> list[int]:
    """Partition ids of an existing topic (describing never auto-creates it)."""
    description = admin.describe_topics(TopicCollection([topic]), request_timeout=TIMEOUT_S)[topic].result()
    return sorted(p.id for p in description.partitions)


def admin_client(conf: Mapping[str, str]) -> AdminClient:
    # isolation.level is for consumers; librdkafka warns about it anywhere else
    return AdminClient({k: v for k, v in conf.items() if k != "isolation.level"})


def list_offsets(admin: AdminClient, topic: str, spec: OffsetSpec, level: IsolationLevel) -> dict[int, int]:
    """Offset per partition of ``topic`` for ``spec``, all partitions in one ListOffsets.

    ``OffsetSpec.latest()`` under read_committed is the last stable offset:
    nothing below it belongs to an undecided transaction.
    """
    wanted = {TopicPartition(topic, p): spec for p in topic_partitions(admin, topic)}
    futures = admin.list_offsets(wanted, isolation_level=level, request_timeout=TIMEOUT_S)
    return {tp.partition: f.result().offset for tp, f in futures.items()}


def produce(producer: Producer, topic: str, key: bytes | None, value: bytes | None, timestamp: int = 0) -> None:
    """Queue one record (timestamp 0: now), waiting while the local queue is full."""
    while True:
        try:
            producer.produce(topic, key=key, value=value, timestamp=timestamp)
            return
        except BufferError:  # let deliveries drain the queue
            producer.poll(0.1)


def ensure_topic(conf: Mapping[str, str], topic: str, partitions: int) -> None:
    """Create ``topic`` unless it exists (an existing topic keeps its partition count)."""
    admin = admin_client(conf)  # held until the result is in: a collected client cancels its requests
    future = admin.create_topics([NewTopic(topic, partitions)], request_timeout=TIMEOUT_S)[topic]
    try:
        future.result()
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise
