"""Share groups (KIP-932) with Java kafka-clients 4.3's KafkaShareConsumer, alone and beside confluent-kafka's
ShareConsumer in one group.

tests/java/ShareConsumer.java acknowledges explicitly by value: "release-..." RELEASE on its first delivery,
"reject-..." REJECT, others ACCEPT; the confluent-kafka member here does the same.
"""

from __future__ import annotations

import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from confluent_kafka import AcknowledgeType, Producer

from helpers.java_clients import JavaClients
from helpers.share import SHARE_BROKER, new_topic, records, share_consumer, warm_up
from helpers.wire import WireClient

SOURCE = Path(__file__).resolve().parents[1] / "java" / "ShareConsumer.java"


@pytest.fixture(scope="module")
def java4(tmp_path_factory) -> JavaClients:
    return JavaClients.build_4x(tmp_path_factory.mktemp("java4-932"), SOURCE)  # missing JDK or jar: make test-deps


def _ack_type(m) -> AcknowledgeType:
    value = m.value()
    if value.startswith(b"release-") and m.delivery_count() == 1:
        return AcknowledgeType.RELEASE
    return AcknowledgeType.REJECT if value.startswith(b"reject-") else AcknowledgeType.ACCEPT


def _members(port: int, group: str) -> int:
    with WireClient(port) as w:
        described = w.request("ShareGroupDescribe", 1, {"group_ids": [group], "include_authorized_operations": False})
    return len(described["groups"][0]["members"])


def test_java_and_confluent_share_consumers_in_one_group(start_broker, java4, tmp_path):
    b = start_broker(SHARE_BROKER)
    new_topic(b.bootstrap, "mixed")
    stop = tmp_path / "stop"
    c = share_consumer(b.bootstrap, "mixed-group", "mixed", explicit=True)
    with ThreadPoolExecutor(1) as pool:
        java_run = pool.submit(java4.run, b.bootstrap, "mixed-group", "mixed", 600_000, 120_000, stop)
        try:
            p = warm_up(b.bootstrap, "mixed", [c], explicit=True)
            deadline = time.monotonic() + 60
            while _members(b.port, "mixed-group") < 2:
                assert time.monotonic() < deadline, "the Java share consumer never joined"
                time.sleep(0.2)
            expected = [f"job-{n}" for n in range(40)] + ["release-1", "reject-1"]
            python_side = []

            def poll_python(timeout: float) -> None:
                got = records(c.poll(timeout))
                for m in got:
                    c.acknowledge(m, _ack_type(m))
                if got:
                    c.commit_sync()
                python_side.extend((m.value().decode(), m.delivery_count()) for m in got)

            for value in expected:
                p.produce("mixed", value.encode())
                p.flush(10)
                poll_python(0.05)
                time.sleep(0.1)  # the Java member's polls get their turn
            deadline = time.monotonic() + 8  # past the redelivery of release-1, and of anything delivered twice
            while time.monotonic() < deadline:
                poll_python(0.3)
        finally:
            stop.touch()
            lines = java_run.result(timeout=180)
            c.close()
    java_side = [(line["value"], line["delivery_count"]) for line in lines if line["op"] == "record"]
    deliveries = Counter(d for d in java_side + python_side if d[0] != "warm-up")
    assert any(v != "warm-up" for v, _ in java_side), "the Java member got a share of the records"
    assert any(v != "warm-up" for v, _ in python_side), "the confluent-kafka member got a share of the records"
    want = Counter({(v, 1): 1 for v in expected}) + Counter({("release-1", 2): 1})
    assert deliveries == want


def test_java_share_consumer_release_redelivers_and_reject_does_not(start_broker, java4, tmp_path):
    b = start_broker(SHARE_BROKER)
    new_topic(b.bootstrap, "jq")
    stop = tmp_path / "stop"
    with ThreadPoolExecutor(1) as pool:
        java_run = pool.submit(java4.run, b.bootstrap, "jg", "jq", 600_000, 120_000, stop)
        warm = share_consumer(b.bootstrap, "jg", "jq", explicit=True)
        try:
            p = warm_up(b.bootstrap, "jq", [warm], explicit=True)
        finally:
            warm.close()
        deadline = time.monotonic() + 60
        while _members(b.port, "jg") != 1:
            assert time.monotonic() < deadline, "the Java share consumer is not the group's only member"
            time.sleep(0.2)
        for value in ("release-a", "reject-b", "job-c"):
            p.produce("jq", value.encode())
        p.flush(10)
        time.sleep(6)  # a redelivery round and more
        stop.touch()
        lines = java_run.result(timeout=120)
    seen = Counter((line["value"], line["delivery_count"]) for line in lines
                   if line["op"] == "record" and line["value"] != "warm-up")
    assert seen == Counter({("release-a", 1): 1, ("release-a", 2): 1, ("reject-b", 1): 1, ("job-c", 1): 1})


ADMIN_SOURCE = Path(__file__).resolve().parents[1] / "java" / "ShareAdmin.java"


@pytest.fixture(scope="module")
def share_admin(tmp_path_factory) -> JavaClients:
    return JavaClients.build_4x(tmp_path_factory.mktemp("java4-932-admin"), ADMIN_SOURCE)


def test_java_admin_lists_describes_alters_and_deletes_share_group_offsets(start_broker, share_admin):
    b = start_broker(SHARE_BROKER)
    new_topic(b.bootstrap, "adm")
    with WireClient(b.port) as w:
        altered = w.request("IncrementalAlterConfigs", 1, {"validate_only": False, "resources": [{
            "resource_type": 32, "resource_name": "ag",
            "configs": [{"name": "share.auto.offset.reset", "config_operation": 0, "value": "earliest"}]}]})
        assert altered["responses"][0]["error_code"] == 0
    p = Producer({"bootstrap.servers": b.bootstrap})
    for n in range(10):
        p.produce("adm", f"a{n}".encode())
    p.flush(10)

    def admin(*args) -> list[dict]:
        return [line for line in share_admin.run(b.bootstrap, "ag", *args) if line["op"] not in ("start", "done")]

    def consume(n: int) -> list[bytes]:
        c = share_consumer(b.bootstrap, "ag", "adm")
        try:
            got = []
            deadline = time.monotonic() + 30
            while len(got) < n and time.monotonic() < deadline:
                got += [m.value() for m in records(c.poll(0.5))]
            c.commit_sync()
            return got
        finally:
            c.close()

    assert sorted(consume(10)) == sorted(f"a{n}".encode() for n in range(10))
    assert admin("list", "describe", "offsets") == [
        {"op": "group", "group_id": "ag", "type": "Share", "state": "Empty"},
        {"op": "described", "group_id": "ag", "state": "Empty", "members": 0},
        {"op": "offset", "topic": "adm", "partition": 0, "start_offset": 10, "lag": 0}]
    for n in range(10, 15):
        p.produce("adm", f"a{n}".encode())
    p.flush(10)
    # a member in the group: its offsets stay as they are
    member = share_consumer(b.bootstrap, "ag", "other-topic-nobody-writes")
    try:
        deadline = time.monotonic() + 30
        while _members(b.port, "ag") != 1:
            assert time.monotonic() < deadline
            member.poll(0.2)
        assert admin("offsets", "alter:adm:0:3") == [
            {"op": "offset", "topic": "adm", "partition": 0, "start_offset": 10, "lag": 5},
            {"op": "error", "error": "GroupNotEmptyException"}]
    finally:
        member.close()
    assert admin("alter:adm:0:3", "offsets") == [
        {"op": "altered"}, {"op": "offset", "topic": "adm", "partition": 0, "start_offset": 3, "lag": 12}]
    assert sorted(consume(12)) == sorted(f"a{n}".encode() for n in range(3, 15))
    assert admin("delete-offsets:adm", "offsets", "delete-group", "list") == [
        {"op": "deleted-offsets"}, {"op": "deleted-group"}]
