"""`moldau cluster describe`: the cluster as its brokers describe it over the Kafka protocol — cluster id,
controller, live brokers (DescribeCluster, or Metadata before Kafka 2.8) and partition health from Metadata:
under-replicated (fewer in-sync replicas than replicas), under min ISR and offline (no leader).

etcd is not part of this answer: the Kafka protocol carries no consensus endpoints (DescribeCluster names
brokers only), so they are not shown; a Moldau broker's are its etcd.connect setting.
"""

from __future__ import annotations

from . import command
from .client import AdminClient, min_insync_replicas

TOOL = "cluster describe"


def add_arguments(parser) -> None:
    command.add_connection_arguments(parser)


def run(args) -> int:
    return command.run(TOOL, args, _describe)


async def health(admin: AdminClient) -> dict[str, int]:
    """Counts of partitions, and of those under-replicated, under min ISR and offline."""
    meta = await admin.metadata()
    configs = await admin.describe_topic_configs(sorted(meta.topics), ["min.insync.replicas"])
    counts = {"topics": len(meta.topics), "partitions": 0, "under_replicated": 0, "under_min_isr": 0, "offline": 0}
    for topic in meta.topics.values():
        min_isr = min_insync_replicas(configs[topic.name])
        for p in topic.partitions.values():
            counts["partitions"] += 1
            counts["under_replicated"] += len(p.isr) < len(p.replicas)
            counts["under_min_isr"] += p.leader < 0 or len(p.isr) < min_isr
            counts["offline"] += p.leader < 0
    return counts


async def _describe(admin: AdminClient) -> None:
    cluster = await admin.describe_cluster()
    counts = await health(admin)
    print(f"Cluster ID: {cluster['cluster_id']}")
    print(f"Controller: {cluster['controller_id']}")
    print(f"Brokers: {len(cluster['brokers'])}")
    for b in sorted(cluster["brokers"], key=lambda b: b["broker_id"]):
        fenced = "\tfenced" if b.get("is_fenced") else ""
        print(f"\tBroker: {b['broker_id']}\tHost: {b['host']}:{b['port']}\tRack: {b['rack'] or 'null'}{fenced}")
    print(f"Topics: {counts['topics']}")
    print(f"Partitions: {counts['partitions']}")
    print(f"UnderReplicatedPartitions: {counts['under_replicated']}")
    print(f"UnderMinIsrPartitions: {counts['under_min_isr']}")
    print(f"OfflinePartitions: {counts['offline']}")
