"""A controlled shutdown ends: a leader SIGTERMed right after its topic was created hands its leaderships
over and exits, without fetching from the brokers it handed them to."""

from __future__ import annotations

import re

from confluent_kafka.admin import NewTopic

from helpers.cluster import start_cluster  # noqa: F401 (fixture)


def test_sigterm_of_a_new_leader_exits_without_following_its_successors(start_cluster):
    # followers' fetches are answered at once, so a fetcher nearly always waits for an answer: where a
    # cancellation used to get lost, and the fetcher that the hand-over started (which nothing stopped)
    # fetched on, holding the exit up until the harness killed the broker
    cluster = start_cluster(3, replica_fetch_wait_max_ms=0)
    for topic in ("handed-over", "handed-over-again"):  # twice: the exit hung only when a race was lost
        admin = cluster.admin()
        leaving = admin.list_topics(timeout=10).controller_id  # as in the failure seen: the controller
        a, b = (n for n in cluster.brokers if n != leaving)
        # two successors, so two fetchers for the hand-over to start; the hand-over of the later partitions
        # takes a while, and the fetchers it started for the first ones used to fetch meanwhile
        assignment = [[leaving, a, b], [leaving, b, a]] * 10
        admin.create_topics([NewTopic(topic, 20, replica_assignment=assignment)])[topic].result(30)
        since = {n: broker.log_offset() for n, broker in cluster.brokers.items()}
        assert cluster.brokers[leaving].stop() == 0  # at once, before the followers have fetched much
        handed = cluster.brokers[leaving].log_since(since[leaving])
        assert f"controlled shutdown of broker {leaving}: " in handed, handed
        for p in range(20):
            assert cluster.partition(topic, p).leader == (a, b)[p % 2]
        assert not re.search(rf"moldau\.fetcher: {topic}-", handed), f"fetched after handing over:\n{handed}"
        for n in (a, b):  # a fetch from it would have taken it back into the ISR it just left
            rejoined = re.findall(rf"{topic}-\d+: ISR \[[\d, ]*\] -> \[[\d, ]*\b{leaving}\b[\d, ]*\]",
                                  cluster.brokers[n].log_since(since[n]))
            assert not rejoined, f"broker {leaving} fetched from {n} after its controlled shutdown: {rejoined}"
        cluster.brokers[leaving].start()
        cluster.wait_for_brokers(3)
