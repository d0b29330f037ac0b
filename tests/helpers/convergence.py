"""Whether every broker's view of the cluster is etcd's: each broker's Metadata answer (live brokers,
controller, topics, each partition's leader, epoch, replicas and ISR) against the keys etcd holds, compared
as `moldau cluster check` does (broker/cluster/check.py).

``gap(broker, seconds)`` starts a gap in one broker's etcd connection through its
MOLDAU_FAULT_ETCD_GAP_FILE hook (the cluster must be started with ``env=gap_env(cluster size)``).
"""

from __future__ import annotations

import os

from broker.cluster.check import view_from_etcd, view_from_metadata
from helpers.wire import WireClient

GAP_FILE = "etcd-gap"


def gap_env(size: int) -> dict[int, dict[str, str]]:
    return {node: {"MOLDAU_FAULT_ETCD_GAP_FILE": GAP_FILE} for node in range(1, size + 1)}


def gap(broker, seconds: float, mode: str = "") -> int:
    """Cuts ``broker``'s etcd watch and session (``mode`` "watch": the watch alone; "drop": its events are lost,
    the watch goes on) for ``seconds``; returns the log offset its fault line comes after."""
    since = broker.log_offset()
    path = broker.data_dir / GAP_FILE
    tmp = path.with_suffix(".tmp")
    tmp.write_text(f"{seconds} {mode}")
    os.replace(tmp, path)  # whole, or the broker could read half a number
    broker.wait_for_log("fault injection .MOLDAU_FAULT_ETCD_GAP_FILE.", timeout=10, since=since)
    return since


def broker_view(port: int) -> dict:
    with WireClient(port) as client:
        return view_from_metadata(client.request("Metadata", 9, {
            "topics": None, "allow_auto_topic_creation": False, "include_cluster_authorized_operations": False,
            "include_topic_authorized_operations": False}))


def etcd_view(cluster) -> dict:
    """The same, from one read of etcd."""
    return view_from_etcd({kv.key.decode()[1:]: kv.value for kv in cluster.etcd_prefix(b"/")})


def wait_converged(cluster, timeout: float = 45) -> dict:
    """Until every live broker's view equals etcd's (both read again at each try); returns that view."""
    last: list = []

    def converged() -> bool:
        expected = etcd_view(cluster)
        views = {node: broker_view(b.port) for node, b in cluster.brokers.items() if b.alive()}
        last[:] = [expected, views]
        return all(v == expected for v in views.values())

    try:
        cluster.wait_until(converged, timeout, "every broker's view to be etcd's")
    except AssertionError as exc:
        expected, views = last or ({}, {})
        wrong = {node: view for node, view in views.items() if view != expected}
        raise AssertionError(f"{exc}: etcd {expected}, differing brokers {wrong}") from None
    return last[0]
