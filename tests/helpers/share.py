"""confluent-kafka ShareConsumers (KIP-932) for the share group tests."""

from __future__ import annotations

import time

from confluent_kafka import AcknowledgeType, Producer, ShareConsumer

from helpers.kafka import create_topic
from helpers.wire import WireClient

SHARE_BROKER = {"group.share.record.lock.duration.ms": 2000, "group.share.heartbeat.interval.ms": 500,
                "group.share.min.heartbeat.interval.ms": 100}


def share_consumer(bootstrap: str, group: str, topic: str, explicit: bool = False) -> ShareConsumer:
    c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                       "share.acknowledgement.mode": "explicit" if explicit else "implicit", "log_level": 3})
    c.subscribe([topic])
    return c


def records(messages) -> list:
    """The records of a poll (errors are failures: these tests expect none)."""
    out = []
    for m in messages:
        assert m.error() is None, m.error()
        out.append(m)
    return out


def warm_up(bootstrap: str, topic: str, consumers: list[ShareConsumer], explicit: bool = False,
            timeout: float = 60.0) -> Producer:
    """A new share group starts at the log's end (share.auto.offset.reset latest): produce markers until one of
    ``consumers`` receives one, so that what is produced next is past the share partition's start. Every
    consumer's markers are accepted. The producer, for the test's records."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        p.produce(topic, b"warm-up")
        p.flush(10)
        for c in consumers:
            got = records(c.poll(0.3))
            if explicit:
                for m in got:
                    c.acknowledge(m, AcknowledgeType.ACCEPT)
                if got:
                    c.commit_sync()
            if got:
                return p
    raise AssertionError("no share consumer received a record")


def new_topic(bootstrap: str, topic: str) -> None:
    create_topic(bootstrap, topic, 1)


def topic_id(port: int, topic: str):
    """The topic's id, as Metadata v12 tells it (share requests name topics by id)."""
    with WireClient(port) as w:
        md = w.request("Metadata", 12, {"topics": [{"topic_id": None, "name": topic}],
                                        "allow_auto_topic_creation": False,
                                        "include_topic_authorized_operations": False})
    return md["topics"][0]["topic_id"]


def heartbeat(w: WireClient, group: str, member: str, epoch: int, topics: list[str] | None = None) -> dict:
    """A raw ShareGroupHeartbeat v1 (``topics`` None: the subscription is unchanged)."""
    return w.request("ShareGroupHeartbeat", 1, {"group_id": group, "member_id": member, "member_epoch": epoch,
                                                "rack_id": None, "subscribed_topic_names": topics})


def describe(w: WireClient, group: str) -> dict:
    """ShareGroupDescribe v1 of one group, waiting out a coordinator that is still loading."""
    deadline = time.monotonic() + 30
    while True:
        found = w.request("ShareGroupDescribe", 1, {"group_ids": [group],
                                                    "include_authorized_operations": False})["groups"][0]
        if found["error_code"] != 14 or time.monotonic() > deadline:  # COORDINATOR_LOAD_IN_PROGRESS
            return found


def listed(w: WireClient) -> list[tuple[str, str]]:
    """(group id, state) of the share groups ListGroups v5 shows."""
    groups = w.request("ListGroups", 5, {"states_filter": [], "types_filter": ["share"]})["groups"]
    return sorted((g["group_id"], g["group_state"]) for g in groups)


def assignment(response: dict) -> list[tuple[str, list[int]]]:
    return sorted((str(t["topic_id"]), t["partitions"]) for t in response["assignment"]["topic_partitions"])
