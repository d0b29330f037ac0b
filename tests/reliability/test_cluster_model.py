"""A model-based test of the cluster's metadata (issue 25): every broker a faithful replica of etcd.

A three-broker cluster on a three-member etcd goes through random steps: topics created and deleted,
acks=all records produced, a broker killed (kill -9, restarted once its lease is gone) or paused
(SIGSTOP past its session), a gap in one broker's etcd watch (and session) with changes made during
it, an etcd member killed with a broker (the issue's reproduction: the lease runs out while the
brokers' client moves to another member) and a topic deleted meanwhile. The model keeps the topics
and every acknowledged record. After each step every live broker's Metadata answer must equal
etcd's keys (live brokers, controller, topics, each partition's leader, epoch, replicas, ISR), and
every acknowledged record of a live topic must be read back at its offset. At the end no broker's
periodic audit may have found a divergence the watch and resyncs left (a false alarm or a lost
change).

MOLDAU_CHAOS_STEPS sets the steps (one of each kind in `make test`, 60 in `make chaos`);
MOLDAU_CHAOS_SEED replays a run's choices.
"""

from __future__ import annotations

import os
import signal
import time
from collections import Counter

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import NewTopic

from helpers.cluster import start_cluster  # noqa: F401 (fixture)
from helpers.convergence import etcd_view, gap, gap_env, wait_converged
from helpers.kafka import read_partitions
from helpers.reliability import budget, record_result, seeded_random

KINDS = ["create", "delete", "produce", "kill", "pause", "gap", "etcd"]
STEPS = budget(len(KINDS), 60, "MOLDAU_CHAOS_STEPS")
SESSION_S = 4


class Model:
    def __init__(self, cluster, rng) -> None:
        self.cluster, self.rng = cluster, rng
        self.topics: dict[str, int] = {}  # name -> partitions
        self.acked: dict[str, dict[tuple[int, int], bytes]] = {}  # name -> (partition, offset) -> value
        self.created = 0
        self.produced = 0  # records acknowledged
        self.checked = 0  # acknowledged records read back, over all checks

    # --- changes -------------------------------------------------------------------------

    def create(self) -> None:
        self.created += 1
        name, partitions = f"t{self.created}", self.rng.randint(1, 3)
        admin = self.cluster.admin()
        try:
            admin.create_topics([NewTopic(name, partitions, 3, config={"min.insync.replicas": "2"})])[name].result(60)
        except (KafkaException, TimeoutError) as exc:  # (etcd or the controller away: done or not, etcd says)
            print(f"creating {name}: {exc}")
        self.settle(name)

    def delete(self) -> None:
        if not self.topics:
            return self.create()
        name = self.rng.choice(sorted(self.topics))
        admin = self.cluster.admin()
        try:
            admin.delete_topics([name])[name].result(60)
        except (KafkaException, TimeoutError) as exc:
            print(f"deleting {name}: {exc}")
        self.settle(name)

    def settle(self, name: str) -> None:
        """The model takes what etcd holds of topic ``name`` once no write of it is under way."""
        self.cluster.wait_until(lambda: not self.cluster.etcd_prefix(f"/creating/{name}".encode()), 30,
                                f"no claim on {name}")
        topics = etcd_view(self.cluster)["topics"]
        if name in topics:
            self.topics[name] = len(topics[name])
            self.acked.setdefault(name, {})
        else:
            self.topics.pop(name, None)
            self.acked.pop(name, None)

    def produce(self, count: int = 30, faults: bool = False) -> None:
        """``count`` records to one topic, acks=all; all acknowledged unless ``faults`` are in play."""
        if not self.topics:
            self.create()
        if not self.topics:  # the create did not take (etcd or the controller away): nothing to write to
            return
        name = self.rng.choice(sorted(self.topics))
        producer = Producer({"bootstrap.servers": self.cluster.bootstrap, "acks": "all", "enable.idempotence": True,
                             "message.timeout.ms": 60_000, "linger.ms": 5})
        acked = self.acked[name]

        def delivered(err, msg) -> None:
            if err is None:
                acked[(msg.partition(), msg.offset())] = msg.value()

        for i in range(count):
            producer.produce(name, f"{name}-{self.produced}-{i}".encode(), partition=i % self.topics[name],
                             on_delivery=delivered)
        before = len(acked)
        producer.flush(90)
        self.produced += len(acked) - before
        assert faults or len(acked) - before == count, f"{name}: {len(acked) - before} of {count} acknowledged"

    def mutate(self) -> None:
        """A change made while some broker does not see etcd."""
        self.rng.choice([self.create, self.delete, lambda: self.produce(faults=True)])()

    # --- faults --------------------------------------------------------------------------

    def wait_unregistered(self, node: int) -> None:
        self.cluster.wait_until(lambda: node not in etcd_view(self.cluster)["brokers"], 30, f"broker {node}'s lease")

    def kill(self) -> None:
        node = self.rng.choice(sorted(self.cluster.brokers))
        self.cluster.brokers[node].kill()
        self.mutate()
        self.wait_unregistered(node)
        wait_converged(self.cluster)
        self.cluster.brokers[node].start(timeout=60)

    def pause(self) -> None:
        b = self.cluster.brokers[self.rng.choice(sorted(self.cluster.brokers))]
        os.kill(b.pid, signal.SIGSTOP)
        try:
            time.sleep(SESSION_S + self.rng.uniform(1, 3))
        finally:
            os.kill(b.pid, signal.SIGCONT)

    def gap(self) -> None:
        b = self.cluster.brokers[self.rng.choice(sorted(self.cluster.brokers))]
        seconds = self.rng.uniform(3, 8)
        gap(b, seconds, self.rng.choice(["", "watch"]))
        ends = time.monotonic() + seconds
        self.mutate()
        time.sleep(max(0.0, ends - time.monotonic()))

    def etcd(self) -> None:
        """The issue's reproduction: a broker dies and the etcd member the brokers talk to goes with it."""
        node = self.rng.choice(sorted(self.cluster.brokers))
        member = self.cluster.etcd.members[0 if self.rng.random() < 0.5 else self.rng.randrange(3)]
        self.cluster.brokers[node].kill()
        member.kill()
        try:
            self.mutate()
            self.wait_unregistered(node)
        finally:
            self.cluster.etcd.restart(member)
        wait_converged(self.cluster)
        self.cluster.brokers[node].start(timeout=60)

    # --- checks --------------------------------------------------------------------------

    def check(self) -> None:
        self.cluster.wait_for_brokers(len(self.cluster.brokers), timeout=60)
        view = wait_converged(self.cluster, timeout=90)
        assert set(view["topics"]) - {"__consumer_offsets", "__transaction_state"} == set(self.topics), view
        for name, partitions in self.topics.items():
            got, _ = read_partitions(self.cluster.bootstrap, name, list(range(partitions)), timeout=60)
            held = {(p, m[0]): m[2] for p, ms in got.items() for m in ms}
            lost = {k: v for k, v in self.acked[name].items() if held.get(k) != v}
            assert not lost, f"{name}: {len(lost)} acknowledged records not read back, e.g. {sorted(lost)[:5]}"
            self.checked += len(self.acked[name])


@pytest.mark.timeout(budget(420, 3600))
def test_every_broker_keeps_etcds_view_through_random_faults(start_cluster):
    rng, seed = seeded_random(f"cluster model: {STEPS} steps")
    cluster = start_cluster(3, etcd_members=3, env=gap_env(3), metrics=True, etcd_session_timeout_ms=SESSION_S * 1000,
                            etcd_audit_interval_ms=3000, min_insync_replicas=2)
    model = Model(cluster, rng)
    model.create()
    kinds: list[str] = []
    done = Counter()
    started = time.monotonic()
    for step in range(STEPS):
        if not kinds:  # every kind once in a random order, again and again
            kinds = rng.sample(KINDS, len(KINDS))
        kind = kinds.pop()
        print(f"step {step + 1}: {kind}")
        getattr(model, kind)()
        model.check()
        done[kind] += 1
    for node in cluster.brokers:
        assert cluster.metric(node, "moldau_etcd_view_divergences_total") == 0, f"broker {node}'s audit found one"
    record_result("cluster_model", seed=seed, steps=STEPS, kinds=dict(done), topics_created=model.created,
                  records_acknowledged=model.produced, acknowledged_records_read_back=model.checked,
                  resyncs={n: cluster.metric(n, "moldau_etcd_view_resyncs_total") for n in cluster.brokers},
                  seconds=round(time.monotonic() - started))
