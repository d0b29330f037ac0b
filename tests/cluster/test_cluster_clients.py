"""Java kafka-clients 3.9 and kcat against a three-broker cluster: metadata lists three brokers, an RF=3
topic is written and read back by each."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from helpers.cluster import start_cluster  # noqa: F401 (fixture)
from helpers.java_clients import JavaClients, every, only, record_tuple

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def java(tmp_path_factory) -> JavaClients:
    return JavaClients.build(tmp_path_factory.mktemp("java"))  # unavailable: the test fails, it does not skip


def test_java_clients_against_the_cluster(start_cluster, java):
    cluster = start_cluster(3, min_insync_replicas=2)
    cluster.create_topic("java-rf3", partitions=1, replication_factor=3)
    produced = java.run(cluster.bootstrap, "produce", "java-rf3", 0, 300, "lz4")  # acks=all, idempotent
    acks = every(produced, "ack")
    assert [a["offset"] for a in acks] == list(range(300))
    consumed = java.run(cluster.bootstrap, "consume", "java-rf3", 0, "read_uncommitted", "-")
    assert [record_tuple(r) for r in every(consumed, "record")] == [record_tuple(a) for a in acks]

    lines = java.run(cluster.bootstrap, "admin", "java-admin", 3)
    described = only(lines, "describeCluster")
    assert sorted(n["id"] for n in described["nodes"]) == [1, 2, 3]
    assert described["controller"]["id"] in (1, 2, 3)
    partitions = only(lines, "describeTopics")["partitions"]
    assert len(partitions) == 3 and all(p["leader"] == p["replicas"][0] for p in partitions)


def kcat(*args: str, input: bytes | None = None) -> str:
    if shutil.which("kcat") is None:
        pytest.fail("kcat is not installed (make test-deps installs it)", pytrace=False)
    r = subprocess.run(["kcat", "-X", "broker.address.family=v4", *args], input=input, capture_output=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr.decode()[-2000:]
    return r.stdout.decode()


def test_kcat_against_the_cluster(start_cluster):
    cluster = start_cluster(3)
    cluster.create_topic("kcat-rf3", partitions=2, replication_factor=3)
    md = json.loads(kcat("-b", cluster.bootstrap, "-L", "-J"))
    assert sorted(b["id"] for b in md["brokers"]) == [1, 2, 3]
    (topic,) = [t for t in md["topics"] if t["topic"] == "kcat-rf3"]
    assert [sorted(r["id"] for r in p["replicas"]) for p in topic["partitions"]] == [[1, 2, 3]] * 2
    assert [sorted(r["id"] for r in p["isrs"]) for p in topic["partitions"]] == [[1, 2, 3]] * 2
    lines = [f"line-{i}" for i in range(50)]
    kcat("-b", cluster.bootstrap, "-P", "-t", "kcat-rf3", "-p", "1", "-X", "acks=all",
         input="\n".join(lines).encode() + b"\n")
    out = kcat("-b", cluster.bootstrap, "-C", "-t", "kcat-rf3", "-p", "1", "-o", "beginning", "-e", "-q")
    assert out.split() == lines
