"""Topic configs are cluster-wide (issue 25): written to the topic's etcd key before the answer, applied
by every broker from its watch, enforced by whichever broker leads, acted on by the controller.

confluent-kafka's AdminClient against a real three-broker cluster with a real etcd.
"""

from __future__ import annotations

import json
import time

import pytest
from confluent_kafka import KafkaError
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

from broker.coordinator.internal_topics import partition_for
from helpers.cluster import CLUSTER_DEFAULTS, start_cluster  # noqa: F401 (fixture)
from helpers.kafka import producer
from helpers.share import listed, records, share_consumer
from helpers.wire import (WireClient, alter_broker_configs, alter_group_configs, alter_quotas, describe_broker_configs,
                          describe_group_configs, describe_quotas)

pytestmark = pytest.mark.timeout(240)

TOPIC = ConfigResource.Type.TOPIC


def _admin(b) -> AdminClient:
    return AdminClient({"bootstrap.servers": b.bootstrap, "broker.address.family": "v4"})


def _set(b, topic: str, **configs: str) -> None:
    entries = [ConfigEntry(k.replace("_", "."), v, incremental_operation=AlterConfigOpType.SET)
               for k, v in configs.items()]
    admin = _admin(b)  # kept alive until the result is in
    (future,) = admin.incremental_alter_configs([ConfigResource(TOPIC, topic, incremental_configs=entries)]).values()
    future.result(30)


def _described(b, topic: str) -> dict[str, str]:
    admin = _admin(b)
    (future,) = admin.describe_configs([ConfigResource(TOPIC, topic)]).values()
    return {name: entry.value for name, entry in future.result(30).items()}


def _everywhere(cluster, topic: str, name: str, value: str) -> bool:
    return all(_described(b, topic)[name] == value for b in cluster.brokers.values() if b.alive())


def _produce_error(b, topic: str) -> KafkaError | None:
    p, _ = producer(b.bootstrap, acks="all", linger_ms=0, retries=0, message_timeout_ms=10000,
                    enable_idempotence=False)
    errors = []
    p.produce(topic, key=b"k", value=b"v", on_delivery=lambda err, m: errors.append(err))
    p.flush(30)
    assert len(errors) == 1
    return errors[0]


def test_topic_configs_are_cluster_wide_enforced_by_every_leader_and_survive_restarts(start_cluster):
    cluster = start_cluster(3)
    cluster.create_topic("shared", partitions=1, replication_factor=3, retention_ms=3_600_000)
    leader = cluster.leader("shared")
    via = next(n for n in cluster.brokers if n != leader)
    follower = next(n for n in cluster.brokers if n not in (leader, via))

    # every broker describes what CreateTopics set, from etcd
    assert all(_described(b, "shared")["retention.ms"] == "3600000" for b in cluster.brokers.values())

    cluster.brokers[follower].kill()
    cluster.wait_for_isr("shared", 0, {leader, via})
    assert _produce_error(cluster.brokers[leader], "shared") is None  # min.insync.replicas 1

    # altered through a broker that does not lead: the leader refuses acks=all from then on
    _set(cluster.brokers[via], "shared", min_insync_replicas="3", cleanup_policy="compact,delete",
         segment_bytes="1048576")
    (kv,) = cluster.etcd_prefix(b"/topics/shared")
    assert json.loads(kv.value)["configs"] == {"retention.ms": "3600000", "min.insync.replicas": "3",
                                               "cleanup.policy": "compact,delete", "segment.bytes": "1048576"}
    cluster.wait_until(lambda: _everywhere(cluster, "shared", "min.insync.replicas", "3"), 30, "min.insync.replicas 3")
    assert {_described(b, "shared")["cleanup.policy"] for b in cluster.brokers.values() if b.alive()} == \
        {"compact,delete"}
    error = _produce_error(cluster.brokers[leader], "shared")
    assert error is not None and error.code() == KafkaError.NOT_ENOUGH_REPLICAS, error

    # validate_only changes nothing anywhere
    entries = [ConfigEntry("min.insync.replicas", "1", incremental_operation=AlterConfigOpType.SET)]
    admin = _admin(cluster.brokers[via])
    (future,) = admin.incremental_alter_configs(
        [ConfigResource(TOPIC, "shared", incremental_configs=entries)], validate_only=True).values()
    future.result(30)
    assert json.loads(cluster.etcd_prefix(b"/topics/shared")[0].value)["configs"]["min.insync.replicas"] == "3"

    # the broker that was down while the configs changed takes them from etcd when it starts
    cluster.brokers[follower].start()
    cluster.wait_until(lambda: _described(cluster.brokers[follower], "shared")["min.insync.replicas"] == "3", 30,
                       "the restarted broker's configs")
    cluster.wait_for_isr("shared", 0, {1, 2, 3})

    # a new leader enforces them too
    cluster.brokers[leader].kill()
    new_leader = cluster.wait_for_leader("shared", not_in=(leader,))
    cluster.wait_until(lambda: len(cluster.partition("shared").isrs) == 2, 30, "the ISR without the old leader")
    error = _produce_error(cluster.brokers[new_leader], "shared")
    assert error is not None and error.code() == KafkaError.NOT_ENOUGH_REPLICAS, error
    _set(cluster.brokers[new_leader], "shared", min_insync_replicas="2")
    cluster.wait_until(lambda: _everywhere(cluster, "shared", "min.insync.replicas", "2"), 30, "min.insync.replicas 2")
    assert _produce_error(cluster.brokers[new_leader], "shared") is None


def test_enabling_unclean_election_elects_an_offline_partitions_leader(start_cluster):
    cluster = start_cluster(3)
    admin = cluster.admin()
    admin.create_topics([NewTopic("offline", 1, replica_assignment=[[2, 3]])])["offline"].result(30)
    cluster.wait_until(lambda: cluster.full_isr("offline", 1, 2), 30, "offline fully replicated")
    assert cluster.leader("offline") == 2

    cluster.brokers[3].kill()
    cluster.wait_for_isr("offline", 0, {2})
    cluster.brokers[2].kill()
    cluster.wait_until(lambda: cluster.leader("offline") == -1, 30, "the partition offline")
    cluster.brokers[3].start()
    cluster.wait_for_brokers(2)
    # broker 3 is out of sync: the partition stays offline while unclean election is off
    cluster.wait_until(lambda: _described(cluster.brokers[3], "offline") is not None, 10, "broker 3 answering")
    assert cluster.leader("offline") == -1

    _set(cluster.brokers[1], "offline", unclean_leader_election_enable="true")
    cluster.wait_until(lambda: cluster.leader("offline") == 3, 30, "broker 3 elected by unclean election")
    assert _described(cluster.brokers[3], "offline")["unclean.leader.election.enable"] == "true"


def _all_quotas(b) -> dict:
    with WireClient(b.port) as c:
        return describe_quotas(c, [])


def test_client_quotas_are_cluster_wide(start_cluster, java):
    """Java's Admin.alterClientQuotas through one broker; every broker describes them and holds clients to
    them, removals included, and a broker that restarts takes them from etcd."""
    from helpers.java_clients import every, only

    cluster = start_cluster(3, quota_window_num=2)  # rates over 2 s: the producer's burst is over its quota
    cluster.create_topic("java-quotas", partitions=1, replication_factor=3)
    lines = java.run(cluster.brokers[1].bootstrap, "quotas", "java-quotas")
    expected = {(("client-id", "java-slow"),): {"producer_byte_rate": 20000.0},
                (("user", None),): {"request_percentage": 500.0}}
    assert {tuple(sorted(line["entity"].items())): line["values"] for line in every(lines, "quota")} == expected
    assert only(lines, "throttle")["produceThrottleTimeMaxMs"] > 0  # by the leader, wherever it is
    for b in cluster.brokers.values():
        cluster.wait_until(lambda: _all_quotas(b) == expected, 30, f"broker {b} describing the quotas")
    assert sorted(kv.key for kv in cluster.etcd_prefix(b"/client_quotas/")) == [
        b"/client_quotas/client-id=java-slow", b"/client_quotas/user=<default>"]

    cluster.brokers[2].stop()
    with WireClient(cluster.brokers[3].port) as c:  # removed through another broker
        assert alter_quotas(c, {"client-id": "java-slow"}, {"producer_byte_rate": None}) == [0]
        assert alter_quotas(c, {"user": "a/b,c=d"}, {"producer_byte_rate": 5.0}) == [0]
    expected = {(("user", None),): {"request_percentage": 500.0}, (("user", "a/b,c=d"),): {"producer_byte_rate": 5.0}}
    assert _all_quotas(cluster.brokers[3]) == expected  # the writer answers with its own change
    cluster.wait_until(lambda: _all_quotas(cluster.brokers[1]) == expected, 30, "broker 1 describing the removal")
    cluster.brokers[2].start()
    cluster.wait_until(lambda: _all_quotas(cluster.brokers[2]) == expected, 30, "the restarted broker's quotas")


def _broker_configs(b, name: str) -> dict[str, tuple[str | None, int]]:
    with WireClient(b.port) as c:
        return describe_broker_configs(c, name)


def test_dynamic_broker_configs_are_cluster_wide(start_cluster):
    """The cluster default and one broker's own configs, set through another broker (over the wire:
    librdkafka sends a BROKER resource only to that broker, and refuses the default), reach every broker
    and bind the leaders; a restarted broker takes them from etcd."""
    cluster = start_cluster(3)
    cluster.create_topic("sized", partitions=1, replication_factor=3)
    leader = cluster.leader("sized")
    other = next(n for n in cluster.brokers if n != leader)
    with WireClient(cluster.brokers[other].port) as c:
        assert alter_broker_configs(c, "", {"message.max.bytes": "2000"}) == (0, None)
        assert alter_broker_configs(c, str(leader), {"num.io.threads": "4"}) == (0, None)
        code, message = alter_broker_configs(c, "", {"sasl.kerberos.min.time.before.relogin": "58000"})
        assert code == KafkaError.INVALID_CONFIG and "broker id must be specified" in message
    assert {kv.key: json.loads(kv.value) for kv in cluster.etcd_prefix(b"/configs/brokers/")} == {
        b"/configs/brokers/<default>": {"message.max.bytes": "2000"},
        f"/configs/brokers/{leader}".encode(): {"num.io.threads": "4"}}
    for node, b in cluster.brokers.items():
        cluster.wait_until(lambda: _broker_configs(b, "") == {"message.max.bytes": ("2000", 3)}, 30,
                           f"broker {node} describing the cluster default")
        own = _broker_configs(b, str(node))
        assert own["message.max.bytes"] == ("2000", 3)
        assert own["num.io.threads"] == (("4", 2) if node == leader else ("8", 5))

    p, _ = producer(cluster.brokers[leader].bootstrap, linger_ms=0, retries=0, message_timeout_ms=10000)
    errors = []
    p.produce("sized", value=bytes(5000), on_delivery=lambda err, m: errors.append(err))
    p.flush(30)
    assert errors[0] is not None and errors[0].code() == KafkaError.MSG_SIZE_TOO_LARGE, errors

    # a topic default of the cluster binds every leader at once: min.insync.replicas above the ISR
    with WireClient(cluster.brokers[other].port) as c:
        assert alter_broker_configs(c, "", {"min.insync.replicas": "4"}) == (0, None)
    cluster.wait_until(lambda: all(_broker_configs(b, "")["min.insync.replicas"] == ("4", 3)
                                   for b in cluster.brokers.values()), 30, "min.insync.replicas 4 everywhere")
    error = _produce_error(cluster.brokers[leader], "sized")
    assert error is not None and error.code() == KafkaError.NOT_ENOUGH_REPLICAS, error
    with WireClient(cluster.brokers[other].port) as c:
        assert alter_broker_configs(c, "", {"min.insync.replicas": None}) == (0, None)
    cluster.wait_until(lambda: all("min.insync.replicas" not in _broker_configs(b, "")
                                   for b in cluster.brokers.values()), 30, "min.insync.replicas deleted everywhere")
    assert _produce_error(cluster.brokers[leader], "sized") is None

    # a broker's advertised.listeners, changed through another: every broker's metadata names the new one
    third = next(n for n in cluster.brokers if n not in (leader, other))
    with WireClient(cluster.brokers[other].port) as c:
        assert alter_broker_configs(c, str(leader), {
            "advertised.listeners": f"PLAINTEXT://localhost:{cluster.brokers[leader].port}"}) == (0, None)
    cluster.wait_until(lambda: AdminClient({"bootstrap.servers": cluster.brokers[third].bootstrap}).list_topics(
        timeout=10).brokers[leader].host == "localhost", 30, "the leader's new endpoint in the metadata")

    cluster.brokers[other].restart()
    assert _broker_configs(cluster.brokers[other], str(other))["message.max.bytes"] == ("2000", 3)


def _lock_duration(b, group: str) -> tuple[str | None, int]:
    with WireClient(b.port) as c:
        return describe_group_configs(c, group)["share.record.lock.duration.ms"]


def _first(consumer, value: bytes, timeout: float) -> tuple[float, int]:
    """When ``consumer`` first received ``value``, and its delivery count (not acknowledged)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for m in records(consumer.poll(0.5)):
            if m.value() == value:
                return time.monotonic(), m.delivery_count()
    raise AssertionError(f"{value!r} not received in {timeout} s")


def test_group_configs_are_cluster_wide(start_cluster):
    """A share group's lock duration, set through a broker that leads nothing of it, is what every broker
    describes and what the share partition's leader locks records for; a restarted broker takes it from etcd."""
    # (3 partitions of __share_group_state, made in one step as in the share failover test: with the default 50,
    # made in steps of 16, the creating broker was seen not to take the leaderships past the first step)
    cluster = start_cluster(3, group_share_heartbeat_interval_ms=500,  # locks of 30 s by default
                            group_share_min_heartbeat_interval_ms=100, share_coordinator_state_topic_num_partitions=3)
    cluster.create_topic("gq", partitions=1, replication_factor=3)
    leader = cluster.leader("gq")
    other = next(n for n in cluster.brokers if n != leader)
    with WireClient(cluster.brokers[other].port) as c:
        assert alter_group_configs(c, "gsg", {"share.record.lock.duration.ms": "2000",
                                              "share.auto.offset.reset": "earliest"}) == (0, None)
        assert alter_group_configs(c, "gsg", {"share.record.lock.duration.ms": "999"})[0] == KafkaError.INVALID_CONFIG
    assert {kv.key: json.loads(kv.value) for kv in cluster.etcd_prefix(b"/configs/groups/")} == {
        b"/configs/groups/gsg": {"share.record.lock.duration.ms": "2000", "share.auto.offset.reset": "earliest"}}
    for node, b in cluster.brokers.items():
        cluster.wait_until(lambda: _lock_duration(b, "gsg") == ("2000", 8), 30, f"broker {node} describing it")

    p, _ = producer(cluster.bootstrap, linger_ms=0)
    p.produce("gq", b"held")
    p.flush(30)
    holder = share_consumer(cluster.bootstrap, "gsg", "gq", explicit=True)
    taker = share_consumer(cluster.bootstrap, "gsg", "gq", explicit=True)
    try:
        held_at, count = _first(holder, b"held", 60)
        assert count == 1
        taken_at, count = _first(taker, b"held", 60)  # the holder never acknowledges it
        assert count == 2 and taken_at - held_at < 20, "released after the group's 2 s lock, not the broker's 30 s"
    finally:
        holder.close()
        taker.close()

    # a restarted broker takes the group's configs from etcd; the one restarted is the group's coordinator, so the
    # group moves (and may move back: preferred leaders) and its next coordinator knows it from __consumer_offsets
    offsets_partitions = CLUSTER_DEFAULTS["offsets.topic.num.partitions"]
    coordinator = cluster.leader("__consumer_offsets", partition_for("gsg", offsets_partitions))
    cluster.brokers[coordinator].restart()
    assert _lock_duration(cluster.brokers[coordinator], "gsg") == ("2000", 8)

    # DeleteGroups at the group's coordinator of the moment deletes it and its key: every broker is back to the
    # default: once it lists the group, never GROUP_ID_NOT_FOUND (a retriable coordinator error if it moved again)
    def deleted() -> bool:
        now = cluster.leader("__consumer_offsets", partition_for("gsg", offsets_partitions))
        with WireClient(cluster.brokers[now].port) as c:
            if listed(c) != [("gsg", "Empty")]:
                return False  # (not loaded yet)
            error = c.request("DeleteGroups", 2, {"groups_names": ["gsg"]})["results"][0]["error_code"]
        assert error in (0, 14, 15, 16), error  # COORDINATOR_LOAD_IN_PROGRESS, _NOT_AVAILABLE, NOT_COORDINATOR
        return error == 0

    cluster.wait_until(deleted, 30, "the empty share group deleted")
    assert cluster.etcd_prefix(b"/configs/groups/") == []
    for node, b in cluster.brokers.items():
        cluster.wait_until(lambda: _lock_duration(b, "gsg") == ("30000", 5), 30, f"broker {node} back to the default")
