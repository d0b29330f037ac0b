"""Every broker's view converges to etcd's after a gap in its etcd connection, deletions included (issue 25).

A gap (the MOLDAU_FAULT_ETCD_GAP_FILE hook) ends a broker's watch and keeps it from reading etcd
again for some seconds; what changes meanwhile reaches it only by a resync. The changes a watch event
would have carried must have their side effects: a dead broker's partitions re-elected, a deleted
topic's logs gone, the new controller known. A watch that loses events without ending is found out by
the periodic audit, which counts the divergence and resyncs.
"""

from __future__ import annotations

import subprocess
import sys

from confluent_kafka.admin import AdminClient

from conftest import REPO_ROOT
from helpers.cluster import start_cluster  # noqa: F401 (fixture)
from helpers.convergence import etcd_view, gap, gap_env, wait_converged


def cluster_check(cluster) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "broker", "cluster", "check", "--etcd", cluster.etcd.endpoint,
               "--bootstrap-server", cluster.bootstrap.split(",")[0]]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, cwd=REPO_ROOT)


def controller_of(cluster) -> int:
    return etcd_view(cluster)["controller"]


def test_a_broker_back_from_an_etcd_gap_drops_what_was_deleted_meanwhile(start_cluster):
    cluster = start_cluster(3, env=gap_env(3))
    cluster.create_topic("kept", partitions=2, replication_factor=3)
    cluster.create_topic("doomed", partitions=2, replication_factor=3)
    controller = controller_of(cluster)
    away, other = [n for n in cluster.brokers if n != controller]
    since = gap(cluster.brokers[away], 12)  # its session expires too
    cluster.brokers[away].wait_for_log("etcd watch ended", timeout=10, since=since)

    # while it does not see etcd: a topic deleted, one created, the controller killed (its lease runs out)
    admin = AdminClient({"bootstrap.servers": cluster.brokers[other].bootstrap})
    admin.delete_topics(["doomed"])["doomed"].result(30)
    cluster.create_topic("born", partitions=1, replication_factor=2)
    cluster.brokers[controller].kill()
    cluster.wait_until(lambda: controller_of(cluster) not in (-1, controller), 30, "a new controller")

    view = wait_converged(cluster, timeout=60)
    assert "doomed" not in view["topics"] and "born" in view["topics"]
    assert controller not in view["brokers"]
    returned = cluster.brokers[away]
    returned.wait_for_log(f"broker {controller} left the cluster", timeout=10, since=since)
    returned.wait_for_log("deleted topic doomed", timeout=10, since=since)
    assert not list(returned.data_dir.glob("doomed-*")), "the deleted topic's logs are still on disk"


def test_a_controller_back_from_a_watch_gap_elects_for_a_broker_that_left_meanwhile(start_cluster):
    cluster = start_cluster(3, env=gap_env(3))
    cluster.create_topic("led", partitions=3, replication_factor=3)
    controller = controller_of(cluster)
    victim = next(leader for p in range(3) if (leader := cluster.leader("led", p)) != controller)
    gap(cluster.brokers[controller], 14, "watch")  # it stays the controller, blind
    cluster.brokers[victim].kill()
    # the victim's registration goes while the controller does not watch: nobody else may elect
    cluster.wait_until(lambda: victim not in etcd_view(cluster)["brokers"], 30, f"broker {victim}'s lease to end")
    assert controller_of(cluster) == controller
    blind = cluster_check(cluster)  # the operator's check sees the controller's view behind etcd's
    assert blind.returncode == 1 and f"broker {controller}: differs from etcd" in blind.stdout, blind

    def elected() -> bool:
        states = etcd_view(cluster)["topics"]["led"].values()
        return all(leader not in (-1, victim) and victim not in isr for leader, _, _, isr in states)

    cluster.wait_until(elected, 60, f"new leaders and ISRs without broker {victim}")
    assert victim not in wait_converged(cluster)["brokers"]
    agreed = cluster_check(cluster)
    assert agreed.returncode == 0 and agreed.stdout.count("same view as etcd") == 2, agreed


def test_the_audit_finds_a_view_that_lost_watch_events_and_repairs_it(start_cluster):
    cluster = start_cluster(3, env=gap_env(3), metrics=True, etcd_audit_interval_ms=2000)
    cluster.create_topic("doomed", partitions=1, replication_factor=3)
    blind = 2
    since = gap(cluster.brokers[blind], 4, "drop")
    admin = cluster.admin()  # kept alive until the result is in
    admin.delete_topics(["doomed"])["doomed"].result(30)
    cluster.brokers[blind].wait_for_log("differs from etcd's at revision", timeout=30, since=since)
    view = wait_converged(cluster)
    assert "doomed" not in view["topics"]
    assert cluster.metric(blind, "moldau_etcd_view_divergences_total") >= 1
    for node in cluster.brokers:
        assert cluster.metric(node, "moldau_etcd_revision_applied") > 0
        if node != blind:
            assert cluster.metric(node, "moldau_etcd_view_divergences_total") == 0, f"broker {node}: a false alarm"
