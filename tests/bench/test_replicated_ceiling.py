"""The replicated ceiling (bench/ceiling.py --log-dir --replicas 3), which bench/cluster.py measures Moldau's
RF=3 rows against: three processes leading a partition each, every Produce's records written by its leader and
copied to the other two before an acks=all answer, all of it readable back; the peers end with node 0."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from bench.targets import Target

PARTITIONS = 3
PER_PARTITION = 2000


@pytest.mark.timeout(120)
def test_every_record_is_on_three_nodes_and_reads_back(tmp_path):
    logs = tmp_path / "logs"
    node0 = Target("ceiling", tmp_path, ("--log-dir", str(logs), "--replicas", "3")).start()
    try:
        peers = node0.process.children()
        assert len(peers) == 2
        admin = AdminClient({"bootstrap.servers": node0.bootstrap})
        admin.create_topics([NewTopic("t", PARTITIONS, 1)])["t"].result(30)
        metadata = admin.list_topics("t", timeout=10)
        assert sorted(metadata.brokers) == [0, 1, 2]
        assert [metadata.topics["t"].partitions[p].leader for p in range(PARTITIONS)] == [0, 1, 2]

        producer = Producer({"bootstrap.servers": node0.bootstrap, "acks": "all", "enable.idempotence": True,
                             "linger.ms": 5})
        failed = []
        for i in range(PARTITIONS * PER_PARTITION):
            producer.produce("t", f"{i:08d}".encode() * 16, partition=i % PARTITIONS,
                             on_delivery=lambda err, msg: err and failed.append(err))
        assert producer.flush(30) == 0 and not failed

        consumer = Consumer({"bootstrap.servers": node0.bootstrap, "group.id": "unused",
                             "enable.auto.commit": False})
        consumer.assign([TopicPartition("t", p, 0) for p in range(PARTITIONS)])
        got: dict[int, list[int]] = {p: [] for p in range(PARTITIONS)}
        deadline = time.monotonic() + 30
        while sum(map(len, got.values())) < PARTITIONS * PER_PARTITION and time.monotonic() < deadline:
            msg = consumer.poll(1)
            if msg is not None and not msg.error():
                got[msg.partition()].append(msg.offset())
                assert int(msg.value()[:8]) % PARTITIONS == msg.partition()
        consumer.close()
        assert got == {p: list(range(PER_PARTITION)) for p in range(PARTITIONS)}

        # each leader's file holds its partition; each other node a copy of the same bytes
        own = {p: (logs.parent / (logs.name if p == 0 else f"{logs.name}-node-{p}") / f"t-{p}.log").read_bytes()
               for p in range(PARTITIONS)}
        for node in range(PARTITIONS):
            node_dir = logs.parent / (logs.name if node == 0 else f"{logs.name}-node-{node}")
            copies = sorted(f.read_bytes() for f in node_dir.glob("from-*.log"))
            assert copies == sorted(own[p] for p in range(PARTITIONS) if p != node)
    finally:
        node0.stop()
    for peer in peers:
        peer.wait(10)  # they end with node 0
