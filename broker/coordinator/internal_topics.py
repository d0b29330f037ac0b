"""The coordinators' internal topics (__consumer_offsets, __transaction_state), and where a key lives in one.

A group or a transactional id lives in partition abs(key.hashCode()) %
partitions, with Java's String.hashCode -- Kafka's rule, so that tools
reading these topics find a key where Kafka would put it.
"""

from __future__ import annotations

import functools
import logging

from storage.catalog import TopicMetadata
from storage.log_manager import LogManager

log = logging.getLogger("moldau.broker")

OFFSETS_TOPIC = "__consumer_offsets"
TRANSACTION_STATE_TOPIC = "__transaction_state"
SHARE_STATE_TOPIC = "__share_group_state"
INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC, SHARE_STATE_TOPIC})

# topic -> (its partition count, replication factor and min.insync.replicas settings)
INTERNAL_TOPIC_SETTINGS = {
    OFFSETS_TOPIC: ("offsets.topic.num.partitions", "offsets.topic.replication.factor", None),
    TRANSACTION_STATE_TOPIC: ("transaction.state.log.num.partitions", "transaction.state.log.replication.factor",
                            "transaction.state.log.min.isr"),
    # made on first need, on a standalone broker too (broker/share/persister.py)
    SHARE_STATE_TOPIC: ("share.coordinator.state.topic.num.partitions",
                            "share.coordinator.state.topic.replication.factor", "share.coordinator.state.topic.min.isr"),
}


def open_internal_topic(logs: LogManager, name: str, num_partitions: int, segment_bytes: int,
                        config) -> TopicMetadata | None:
    """The topic, created compacted with ``num_partitions`` if missing. An existing one keeps
    its partition count: keys must stay in the partitions their records are in. Compaction
    keeps what a restart replays to the live keys. In a cluster it is created in the metadata store on
    first use (FindCoordinator) and comes here from there: None until then."""
    topic = logs.topic(name)
    if topic is None and not config["etcd.connect"]:
        topic = logs.create_topic(name, num_partitions, {"cleanup.policy": "compact", "segment.bytes": str(segment_bytes)})
        log.info("created %s with %d partitions", name, topic.num_partitions)
    return topic


def java_string_hash(s: str) -> int:
    """Java's String.hashCode: 31-polynomial over UTF-16 code units, as a signed int32."""
    h = 0
    units = s.encode("utf-16-be")
    for i in range(0, len(units), 2):
        h = (31 * h + (units[i] << 8 | units[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


@functools.lru_cache(maxsize=4096)  # asked several times per coordinator request, for the same few keys
def partition_for(key: str, num_partitions: int) -> int:
    """abs(hashCode) % partitions, where abs(Integer.MIN_VALUE) is 0 (Kafka's Utils.abs)."""
    h = java_string_hash(key)
    return (0 if h == -(1 << 31) else abs(h)) % num_partitions
