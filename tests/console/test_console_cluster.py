"""The console on a three-broker cluster (etcd): brokers, the controller, each partition's leader, replicas and
ISR as the cluster's metadata has them, and the under-replicated partitions a dead broker leaves."""

from __future__ import annotations

import time

import pytest

from helpers.cluster import start_cluster  # noqa: F401 (fixture)
from helpers.console import cell, chromium, screenshot, start_console  # noqa: F401 (fixture)

pytestmark = pytest.mark.timeout(240)

TOPIC, PARTITIONS = "spread", 6


def shown_partitions(page) -> dict[int, tuple[int, list[int], list[int]]]:
    return {p: (int(cell(page, f"#partition-{p} .leader")), sorted(map(int, cell(page, f"#partition-{p} .replicas").split(","))),
                sorted(map(int, cell(page, f"#partition-{p} .isr").split(",")))) for p in range(PARTITIONS)}


def truth(cluster) -> dict[int, tuple[int, list[int], list[int]]]:
    parts = cluster.metadata(TOPIC).topics[TOPIC].partitions
    return {p: (m.leader, sorted(m.replicas), sorted(m.isrs)) for p, m in parts.items()}


def test_console_shows_a_clusters_brokers_leaders_and_isr(start_cluster, start_console):
    cluster = start_cluster(3)
    cluster.create_topic(TOPIC, PARTITIONS, 3)
    console = start_console(cluster.bootstrap)
    with chromium() as page:
        page.goto(console.url + "/cluster")
        meta = cluster.metadata()
        assert cell(page, "#controller") == str(meta.controller_id)
        for node, broker in meta.brokers.items():
            leaders = sum(1 for t in meta.topics.values() for p in t.partitions.values() if p.leader == node)
            assert cell(page, f"#broker-{node} .leaders") == str(leaders)
            assert f"{broker.host}:{broker.port}" in cell(page, f"#broker-{node}")
        assert cell(page, "#under-replicated") == "0"
        page.goto(console.url + f"/topics/{TOPIC}")
        assert shown_partitions(page) == truth(cluster)
        screenshot(page, "cluster-topic")

        cluster.brokers[3].kill()  # its replicas leave the ISRs; its leaderships move
        cluster.wait_until(lambda: all(3 not in isr and leader != 3 for leader, _, isr in truth(cluster).values()),
                           60, "broker 3 out of every ISR")
        deadline = time.monotonic() + 30
        while shown_partitions(page) != truth(cluster) and time.monotonic() < deadline:
            time.sleep(0.5)  # the page refreshes itself
        assert shown_partitions(page) == truth(cluster)
        def under_replicated() -> int:
            meta = cluster.metadata()
            return sum(1 for t in meta.topics.values() for p in t.partitions.values() if len(p.isrs) < len(p.replicas))

        # every broker answers from its own view: the one asked may apply the last ISR change a moment later
        cluster.wait_until(lambda: under_replicated() >= PARTITIONS, 30, "the topic under-replicated in every answer")
        page.goto(console.url + "/cluster")
        under = under_replicated()
        assert under >= PARTITIONS and cell(page, "#under-replicated") == str(under)
        assert page.locator("#broker-3").count() == 0 and page.locator("#broker-1").count() == 1
        screenshot(page, "cluster-degraded")
