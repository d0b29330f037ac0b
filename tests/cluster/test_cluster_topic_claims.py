"""Topics of more than 128 partitions take several etcd transactions to create or grow. Two such writes of
one name, on two brokers, must not mix (one wins, the other gets an error), and a creator killed between
them must leave nothing that outlives its session. Raw CreateTopics / CreatePartitions frames, so that each
request goes to the broker chosen (client libraries send them to the controller)."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from confluent_kafka.admin import AdminClient

from helpers.cluster import start_cluster  # noqa: F401 (fixture)
from helpers.wire import WireClient

pytestmark = pytest.mark.timeout(240)

REQUEST_TIMED_OUT = 7
# what the loser of two writes may answer: the winner's claim is there; or it was done before the loser's
# claim (TOPIC_ALREADY_EXISTS, REASSIGNMENT_IN_PROGRESS), or before its request came (INVALID_PARTITIONS)
LOSER_CREATE = (REQUEST_TIMED_OUT, 36)
LOSER_GROW = (REQUEST_TIMED_OUT, 60, 37)


def create_request(name: str, plan: dict[int, list[int]]) -> dict:
    return {"topics": [{"name": name, "num_partitions": -1, "replication_factor": -1, "configs": [],
                        "assignments": [{"partition_index": p, "broker_ids": r} for p, r in plan.items()]}],
            "timeout_ms": 30000, "validate_only": False}


def grow_request(name: str, count: int, plan: dict[int, list[int]]) -> dict:
    assignments = [{"broker_ids": r} for _, r in sorted(plan.items())]
    return {"topics": [{"name": name, "count": count, "assignments": assignments}], "timeout_ms": 30000,
            "validate_only": False}


def at_once(cluster, requests: dict[int, tuple[str, int, dict]]) -> dict[int, dict]:
    """Each broker's request sent at the same moment; node -> its answer for the topic."""
    ready = threading.Barrier(len(requests))

    def send(node: int) -> dict:
        api, version, body = requests[node]
        with WireClient(cluster.brokers[node].port, timeout=60) as client:
            ready.wait()
            response = client.request(api, version, body)
        return (response["topics"] if api == "CreateTopics" else response["results"])[0]

    with ThreadPoolExecutor(len(requests)) as pool:
        return dict(zip(requests, pool.map(send, requests), strict=False))


def replicas_everywhere(cluster, name: str) -> list[dict[int, list[int]]]:
    """Each broker's Metadata answer for the topic: partition -> replicas."""
    return [{p: list(m.replicas) for p, m in AdminClient({"bootstrap.servers": b.bootstrap}).list_topics(
        name, timeout=10).topics[name].partitions.items()} for b in cluster.brokers.values() if b.alive()]


def states_in_etcd(cluster, name: str) -> list[int]:
    return sorted(int(kv.key.rsplit(b"/", 1)[1]) for kv in cluster.etcd_prefix(f"/partitions/{name}/".encode()))


def test_concurrent_creates_and_growths_of_one_topic_on_two_brokers_do_not_mix(start_cluster):
    """Every etcd transaction of a topic write waits 300 ms on brokers 1 and 2, so their two creates of
    "contested" (and then their two growths) overlap step by step: exactly one wins, the other answers an
    error, and every partition has the winner's replicas -- none of the loser's, and no extra states."""
    slow = {"MOLDAU_FAULT_DELAY_TOPIC_WRITE_STEPS_MS": "300"}
    # no auto-creation: a client asking for "contested" once it is deleted must not create it again meanwhile;
    # a longer session: a broker busy creating or deleting hundreds of logs keeps its claims
    cluster = start_cluster(3, env={1: slow, 2: slow}, etcd_session_timeout_ms=10000, auto_create_topics_enable=False)
    plans = {1: {p: [1, 2] for p in range(200)}, 2: {p: [2, 3] for p in range(150)}}
    answers = at_once(cluster, {n: ("CreateTopics", 5, create_request("contested", plans[n])) for n in plans})
    errors = {n: a["error_code"] for n, a in answers.items()}
    assert sorted(errors.values())[0] == 0 and sorted(errors.values())[1] in LOSER_CREATE, errors
    plan = plans[min(errors, key=errors.get)]
    cluster.wait_until(lambda: cluster.full_isr("contested", len(plan), 2), 60, "contested fully replicated")
    assert all(seen == plan for seen in replicas_everywhere(cluster, "contested"))
    assert states_in_etcd(cluster, "contested") == sorted(plan)

    count = len(plan)
    grows = {1: {p: [3, 1] for p in range(count, count + 180)}, 2: {p: [1, 3] for p in range(count, count + 140)}}
    answers = at_once(cluster, {n: ("CreatePartitions", 1, grow_request("contested", max(grows[n]) + 1, grows[n]))
                                for n in grows})
    errors = {n: a["error_code"] for n, a in answers.items()}
    assert sorted(errors.values())[0] == 0 and sorted(errors.values())[1] in LOSER_GROW, errors
    plan |= grows[min(errors, key=errors.get)]
    cluster.wait_until(lambda: cluster.full_isr("contested", len(plan), 2), 60, "contested grown and replicated")
    assert all(seen == plan for seen in replicas_everywhere(cluster, "contested"))
    assert states_in_etcd(cluster, "contested") == sorted(plan)
    assert cluster.etcd_prefix(b"/creating/") == []

    # a write that fails after its claim (its topic deleted meanwhile: 1,000 partitions take 9 steps of 300 ms)
    # gives the claim back before it answers, so the name is free at once
    admin = cluster.admin()
    count = len(plan)
    growth = {p: [1, 2] for p in range(count, count + 1000)}
    with ThreadPoolExecutor(1) as pool:
        growing = pool.submit(at_once, cluster, {1: ("CreatePartitions", 1, grow_request("contested", count + 1000,
                                                                                         growth))})
        time.sleep(0.5)
        admin.delete_topics(["contested"])["contested"].result(30)
        assert growing.result()[1]["error_code"] == 60, growing.result()  # REASSIGNMENT_IN_PROGRESS: it changed
    assert cluster.etcd_prefix(b"/creating/") == [] and states_in_etcd(cluster, "contested") == []
    cluster.wait_until(lambda: "contested" not in cluster.metadata().topics, 30, "contested deleted")
    cluster.create_topic("contested", partitions=1, replication_factor=3)


def test_a_creator_killed_between_steps_leaves_nothing_behind(start_cluster):
    """Broker 2 dies (SIGKILL) after writing 128 of 300 partition states of "half-made". While its claim
    lives (its etcd session, 15 s here) a create of that name elsewhere answers the retriable
    REQUEST_TIMED_OUT; then the controller drops the 128 states, and the create succeeds with its own.
    Broker 2, restarted, dies the same way growing it: the controller drops the states past its count."""
    cluster = start_cluster(3, env={2: {"MOLDAU_FAULT_KILL_AFTER_TOPIC_WRITE_STEPS": "1"}},
                            etcd_session_timeout_ms=15000)
    doomed = cluster.brokers[2]
    with WireClient(doomed.port, timeout=60) as client, pytest.raises(OSError):
        client.request("CreateTopics", 5, create_request("half-made", {p: [2, 1, 3] for p in range(300)}))
    cluster.wait_until(lambda: not doomed.alive(), 30, "broker 2 killed")
    assert "killing the broker after partition states step 1" in doomed.log_text()
    assert states_in_etcd(cluster, "half-made") == list(range(128))

    plan = {p: [1, 3] for p in range(150)}
    with WireClient(cluster.brokers[1].port, timeout=60) as client:
        refused = client.request("CreateTopics", 5, create_request("half-made", plan))["topics"][0]
    assert refused["error_code"] == REQUEST_TIMED_OUT, refused
    assert "broker 2 is creating topic 'half-made'" in refused["error_message"]

    cluster.wait_until(lambda: states_in_etcd(cluster, "half-made") == [], 60, "the dead creator's states dropped")
    assert cluster.etcd_prefix(b"/creating/") == []
    with WireClient(cluster.brokers[1].port, timeout=60) as client:
        created = client.request("CreateTopics", 5, create_request("half-made", plan))["topics"][0]
    assert created["error_code"] == 0, created
    cluster.wait_until(lambda: cluster.full_isr("half-made", 150, 2), 60, "half-made fully replicated")
    assert all(seen == plan for seen in replicas_everywhere(cluster, "half-made"))
    assert states_in_etcd(cluster, "half-made") == list(range(150))

    doomed.start()
    cluster.wait_for_brokers(3)
    with WireClient(doomed.port, timeout=60) as client:
        try:
            answer = client.request("CreatePartitions", 1,
                                    grow_request("half-made", 450, {p: [2, 1] for p in range(150, 450)}))
        except OSError:
            pass  # the broker died mid-growth, as the fault makes it
        else:
            pytest.fail(f"broker 2 answered the growth instead of dying after its first step: {answer}")
    cluster.wait_until(lambda: not doomed.alive(), 30, "broker 2 killed again")
    assert states_in_etcd(cluster, "half-made") == list(range(150 + 128))
    cluster.wait_until(lambda: states_in_etcd(cluster, "half-made") == list(range(150)), 60,
                       "the dead grower's states dropped")
    assert cluster.etcd_prefix(b"/creating/") == []
    with WireClient(cluster.brokers[3].port, timeout=60) as client:
        grown = client.request("CreatePartitions", 1,
                               grow_request("half-made", 200, {p: [3, 1] for p in range(150, 200)}))
    assert grown["results"][0]["error_code"] == 0, grown
    plan |= {p: [3, 1] for p in range(150, 200)}
    cluster.wait_until(lambda: cluster.full_isr("half-made", 200, 2), 60, "half-made grown and replicated")
    assert all(seen == plan for seen in replicas_everywhere(cluster, "half-made"))
    assert states_in_etcd(cluster, "half-made") == list(range(200))
