"""A Moldau cluster for tests: an etcd (one member or three) and N broker processes on 127.0.0.1
(issues 12-14 share it).

Each broker is a conftest BrokerProcess with ``node.id`` and ``etcd.connect``
set; the etcd is started with free ports and a temp data dir. Short session
and lag timeouts keep failover within seconds on a loaded machine.

``proxied=True`` puts fault proxies (helpers.fault_proxy) on the paths a
network partition cuts: each broker gets a second listener, INTERNAL, as its
``inter.broker.listener.name``, advertised through a proxy in front of it, so
replication goes through the proxies while clients connect directly; and each
broker reaches each etcd member through a proxy of its own.
"""

from __future__ import annotations

import asyncio
import sys
import time
import urllib.request
import uuid
from pathlib import Path

import aetcd
import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from conftest import BrokerProcess, free_port
from prometheus_client.parser import text_string_to_metric_families

from broker.cluster.etcd_session import grpc_target, parse_connect
from broker.cluster.local_etcd import LocalEtcd
from helpers.fault_proxy import FaultProxy
from helpers.wire import WireClient

CLUSTER_DEFAULTS = {
    "etcd.session.timeout.ms": 4000,
    "replica.lag.time.max.ms": 6000,
    "group.initial.rebalance.delay.ms": 0,
    "offsets.topic.num.partitions": 3,
    "transaction.state.log.num.partitions": 3,
}


class Cluster:
    def __init__(self, workdir: Path, size: int = 3, overrides: dict | None = None, proxied: bool = False,
                 etcd_members: int = 1, env: dict[int, dict[str, str]] | None = None, metrics: bool = False) -> None:
        self.workdir = Path(workdir)
        self.etcd = LocalEtcd(self.workdir / "etcd", members=etcd_members, ports=free_port)
        self.brokers: dict[int, BrokerProcess] = {}
        self.replication_proxies: dict[int, FaultProxy] = {}  # node -> the proxy in front of its INTERNAL listener
        self.etcd_proxies: dict[int, list[FaultProxy]] = {}  # node -> its proxies to the etcd members
        self.metrics_ports: dict[int, int] = {}  # node -> its Prometheus port (metrics=True)
        for node in range(1, size + 1):
            config = {**CLUSTER_DEFAULTS, **(overrides or {}), "node.id": node}
            if metrics:
                config["metrics.port"] = self.metrics_ports[node] = free_port()
            if proxied:
                internal = free_port()
                proxy = self.replication_proxies[node] = FaultProxy(("127.0.0.1", internal))
                config.update({
                    "listeners": f"PLAINTEXT://127.0.0.1:{{port}},INTERNAL://127.0.0.1:{internal}",
                    "advertised.listeners": f"PLAINTEXT://127.0.0.1:{{port}},INTERNAL://{proxy.address}",
                    "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT",
                    "inter.broker.listener.name": "INTERNAL",
                })
                self.etcd_proxies[node] = [FaultProxy(("127.0.0.1", m.client_port), source=node)
                                           for m in self.etcd.members]
            self.brokers[node] = BrokerProcess(self.workdir / f"broker-{node}", config)
            self.brokers[node].env = (env or {}).get(node, {})

    def start(self) -> "Cluster":
        self.etcd.start()
        for node, b in self.brokers.items():
            proxies = self.etcd_proxies.get(node)
            b.overrides["etcd.connect"] = ",".join(p.address for p in proxies) if proxies else self.etcd.endpoint
            b.start()
        self.wait_for_brokers(len(self.brokers))
        return self

    # --- network partitions (proxied clusters) ---------------------------------------------

    def cut_from_brokers(self, node: int, mode: str) -> None:
        """Replication between ``node`` and the other brokers stops both ways (``mode``: drop or blackhole);
        clients and etcd still reach every broker."""
        others = [n for n in self.brokers if n != node]
        self.replication_proxies[node].set(mode, others)
        for n in others:
            self.replication_proxies[n].set(mode, [node])

    def cut_from_etcd(self, node: int, mode: str) -> None:
        """``node`` loses etcd (its session expires); it still replicates with the others and serves clients."""
        for proxy in self.etcd_proxies[node]:
            proxy.set(mode, [node])

    def heal(self) -> None:
        for proxy in [*self.replication_proxies.values(), *(p for ps in self.etcd_proxies.values() for p in ps)]:
            proxy.heal()

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values() if b.alive())

    def admin(self) -> AdminClient:
        return AdminClient({"bootstrap.servers": self.bootstrap})

    def metadata(self, topic: str | None = None):
        return self.admin().list_topics(topic, timeout=10)

    def wait_for_brokers(self, count: int, timeout: float = 30) -> None:
        self.wait_until(lambda: len(self.metadata().brokers) == count, timeout, f"{count} live brokers")

    def create_topic(self, name: str, partitions: int = 1, replication_factor: int = 3, **configs) -> None:
        configs = {k.replace("_", "."): str(v) for k, v in configs.items()}
        admin = self.admin()  # kept alive until the result is in
        futures = admin.create_topics([NewTopic(name, partitions, replication_factor, config=configs)])
        futures[name].result(30)
        self.wait_until(lambda: self.full_isr(name, partitions, replication_factor), 30, f"{name} fully replicated")
        # every broker's own answer has it (each applies etcd's topic key from its watch)
        self.wait_until(lambda: all(self.known_by(node, name, partitions) for node, b in self.brokers.items()
                                    if b.alive()), 30, f"{name} known by every broker")

    def known_by(self, node: int, topic: str, partitions: int) -> bool:
        """Whether broker ``node`` itself answers Metadata for the topic with its partitions' leaders."""
        with WireClient(self.brokers[node].port) as client:
            answer = client.request("Metadata", 12, {"topics": [{"topic_id": uuid.UUID(int=0), "name": topic}],
                                                     "allow_auto_topic_creation": False,
                                                     "include_topic_authorized_operations": False})["topics"][0]
        return answer["error_code"] == 0 and len(answer["partitions"]) == partitions and all(
            p["leader_id"] >= 0 for p in answer["partitions"])

    def partition(self, topic: str, index: int = 0):
        """confluent-kafka's PartitionMetadata (leader, replicas, isrs) as the cluster reports it."""
        md = self.metadata(topic)
        t = md.topics.get(topic)
        return None if t is None or t.error is not None and not t.partitions else t.partitions.get(index)

    def full_isr(self, topic: str, partitions: int, rf: int) -> bool:
        for p in range(partitions):
            part = self.partition(topic, p)
            if part is None or part.leader < 0 or len(part.isrs) != rf:
                return False
        return True

    def leader(self, topic: str, index: int = 0) -> int:
        part = self.partition(topic, index)
        return -1 if part is None else part.leader

    def wait_for_leader(self, topic: str, index: int = 0, not_in=(), timeout: float = 30) -> int:
        self.wait_until(lambda: self.leader(topic, index) not in (-1, *not_in), timeout, f"a leader for {topic}-{index}")
        return self.leader(topic, index)

    def wait_for_isr(self, topic: str, index: int, isr: set[int], timeout: float = 30) -> None:
        self.wait_until(lambda: (p := self.partition(topic, index)) is not None and set(p.isrs) == isr, timeout,
                        f"ISR {sorted(isr)} for {topic}-{index}")

    @staticmethod
    def wait_until(check, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            try:
                if check():
                    return
            except Exception as exc:  # noqa: BLE001 -- a broker going away mid-query: ask again
                last = exc
            time.sleep(0.2)
        raise AssertionError(f"timed out waiting for {what}" + (f" (last error: {last})" if last else ""))

    def etcd_prefix(self, prefix: bytes) -> list:
        """The etcd key-values under ``prefix``, read from etcd itself."""
        async def read() -> list:
            client = aetcd.Client(*grpc_target(parse_connect(self.etcd.endpoint)[0]), timeout=10)
            try:
                return list(await client.get_prefix(prefix))
            finally:
                await client.close()

        return asyncio.run(read())

    def registrations(self) -> dict[int, int]:
        """node.id -> the etcd lease its registration is under, read from etcd (a broker that lost its session
        registers under a new one)."""
        return {int(kv.key.rsplit(b"/", 1)[1]): kv.lease for kv in self.etcd_prefix(b"/brokers/ids/")}

    def metric(self, node: int, name: str) -> float:
        """One sample of a broker's Prometheus scrape (metrics=True), by name."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_ports[node]}/metrics", timeout=10) as response:
            text = response.read().decode()
        return next(s.value for family in text_string_to_metric_families(text) for s in family.samples if s.name == name)

    def log_bytes(self, node: int, topic: str, index: int = 0) -> bytes:
        """The concatenated segment files of one replica."""
        return b"".join(p.read_bytes() for p in self.brokers[node].segment_files(topic, index))

    def stop(self) -> None:
        self.heal()
        for b in self.brokers.values():
            b.cleanup()
        self.etcd.stop()
        for proxy in [*self.replication_proxies.values(), *(p for ps in self.etcd_proxies.values() for p in ps)]:
            proxy.close()


@pytest.fixture
def start_cluster(tmp_path_factory):
    """``start_cluster(3, proxied=False, etcd_members=1, env=None, metrics=False, **overrides)`` -> a started Cluster
    (``_`` in names for ``.``; ``env``: node id -> environment variables of that broker alone, e.g. a fault hook;
    ``metrics``: each broker serves Prometheus on ``cluster.metrics_ports[node]``); stopped at teardown. Import
    it into a test module to use it: ``from helpers.cluster import start_cluster``."""
    started: list[Cluster] = []

    def _start(size: int = 3, proxied: bool = False, etcd_members: int = 1,
               env: dict[int, dict[str, str]] | None = None, metrics: bool = False, **overrides) -> Cluster:
        cluster = Cluster(tmp_path_factory.mktemp("cluster"), size,
                          {k.replace("_", "."): v for k, v in overrides.items()}, proxied, etcd_members, env, metrics)
        started.append(cluster)
        cluster.start()
        return cluster

    yield _start
    for cluster in started:
        for node, b in cluster.brokers.items():
            sys.stderr.write(f"\n----- broker {node} stderr tail -----\n{b.log_tail(40)}\n")
        cluster.stop()
