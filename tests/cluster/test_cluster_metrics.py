"""The metrics Kafka operators' dashboards and alerts are built on (issue 28), read from every broker of a
cluster over HTTP and checked against the cluster's own answer (Metadata): the active controller, leader
counts, under-replicated and under-min-ISR partitions after a follower stops, ISR shrinks and expands,
offline partitions (counted by the controller only), replica fetcher lag."""

import pytest
from confluent_kafka.admin import NewTopic
from helpers.cluster import start_cluster  # noqa: F401 (fixture)
from helpers.kafka import make_messages, produce_all

from operations.test_metrics import scrape

TOPIC = "watched"
PARTITIONS = 3


def value(samples: dict, name: str) -> float:
    return samples[(name,)]


def truth(cluster, live: set[int]) -> dict[int, dict[str, int]]:
    """Per live broker, from Metadata: partitions led, under-replicated, under min ISR (TOPIC needs 3)."""
    out = {b: {"leaders": 0, "under": 0, "under_min_isr": 0} for b in live}
    for name, topic in cluster.metadata().topics.items():
        for p in topic.partitions.values():
            if p.leader not in out:
                continue
            out[p.leader]["leaders"] += 1
            out[p.leader]["under"] += len(p.isrs) < len(p.replicas)
            out[p.leader]["under_min_isr"] += name == TOPIC and len(p.isrs) < 3
    return out


def matches(cluster, live: set[int]) -> bool:
    want = truth(cluster, live)
    for b in live:
        s = scrape(cluster.metrics_ports[b])
        got = {"leaders": value(s, "kafka_server_replicamanager_leadercount"),
               "under": value(s, "kafka_server_replicamanager_underreplicatedpartitions"),
               "under_min_isr": value(s, "kafka_server_replicamanager_underminisrpartitioncount")}
        if got != want[b]:
            return False
    return True


def counters(cluster, live: set[int], name: str) -> dict[int, float]:
    return {b: scrape(cluster.metrics_ports[b])[(name,)] for b in live}


def grew(before: dict[int, float], after: dict[int, float]) -> float:
    return sum(after[b] - before[b] for b in after)


@pytest.mark.timeout(240)
def test_cluster_metrics_follow_the_truth(start_cluster):
    cluster = start_cluster(3, metrics=True)
    everyone = {1, 2, 3}
    controller = cluster.metadata().controller_id
    cluster.wait_until(lambda: [scrape(cluster.metrics_ports[b])[("kafka_controller_kafkacontroller_activecontrollercount",)]
                                for b in (1, 2, 3)] == [float(b == controller) for b in (1, 2, 3)], 30,
                       "one active controller, the one Metadata names")
    cluster.create_topic(TOPIC, PARTITIONS, 3, min_insync_replicas=3)
    produce_all(cluster.bootstrap, TOPIC, make_messages(300, PARTITIONS))
    solo_node, stopped = [b for b in (1, 2, 3) if b != controller]
    admin = cluster.admin()
    admin.create_topics([NewTopic("alone", 1, replica_assignment=[[solo_node]])])["alone"].result(30)
    cluster.wait_until(lambda: matches(cluster, everyone), 30, "leader counts as Metadata has them, nothing under-replicated")
    for b in everyone:
        s = scrape(cluster.metrics_ports[b])
        assert s[("kafka_server_replicafetchermanager_maxlag", ("clientId", "Replica"))] == 0  # all caught up
        # (a broker no client has asked for Metadata yet has neither series)
        requests = s.get(("kafka_network_requestmetrics_requests_total", ("request", "Metadata")), 0)
        assert s.get(("kafka_network_requestmetrics_totaltimems_count", ("request", "Metadata")), 0) == requests
    shrinks = counters(cluster, everyone, "kafka_server_replicamanager_isrshrinks_total")

    # a follower stops: the partitions it followed are under-replicated and (min.insync.replicas=3) under
    # min ISR on their leaders; the ISRs shrank
    cluster.brokers[stopped].stop()
    live = everyone - {stopped}
    cluster.wait_until(lambda: sum(t["under"] for t in truth(cluster, live).values()) >= PARTITIONS, 40,
                       f"broker {stopped} out of the ISRs")
    cluster.wait_until(lambda: matches(cluster, live), 30, "under-replicated and under-min-ISR counts as Metadata has them")
    assert sum(t["under_min_isr"] for t in truth(cluster, live).values()) == PARTITIONS
    assert grew(shrinks, counters(cluster, live, "kafka_server_replicamanager_isrshrinks_total")) >= 1
    expands = counters(cluster, live, "kafka_server_replicamanager_isrexpands_total")

    # back: the ISRs expand and nothing is under-replicated
    cluster.brokers[stopped].start()
    cluster.wait_until(lambda: matches(cluster, everyone) and sum(t["under"] for t in truth(cluster, everyone).values()) == 0,
                       60, "full ISRs again")
    assert grew(expands, counters(cluster, live, "kafka_server_replicamanager_isrexpands_total")) >= 1

    # the only replica of "alone" stops: the controller counts it offline, no other broker does
    cluster.brokers[solo_node].stop()
    live = everyone - {solo_node}

    def offline() -> dict[int, float]:
        return {b: scrape(cluster.metrics_ports[b])[("kafka_controller_kafkacontroller_offlinepartitionscount",)]
                for b in live}
    cluster.wait_until(lambda: offline() == {b: float(b == controller) for b in live}, 30,
                       "one offline partition, counted by the controller alone")

