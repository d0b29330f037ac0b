"""Incremental fetch sessions (KIP-227): raw requests for each rule, and Java kafka-clients, which use them.

librdkafka does not use sessions (it sends session id 0 and epoch -1: checked below), so its
consumers are served sessionless as before.
"""

from __future__ import annotations

import struct
import threading
import time
import uuid

import pytest
from confluent_kafka import OFFSET_BEGINNING, TopicPartition

from helpers import wire
from helpers.java_clients import JavaClients, every
from helpers.kafka import consume_until, consumer, create_topic, flush, producer
from helpers.relay import CaptureRelay, broker_behind_relay
from protocol import codec, frames
from protocol.records import build_batch

TOPIC = "sessions"
FETCH_SESSION_ID_NOT_FOUND = 70
INVALID_FETCH_SESSION_EPOCH = 71
UNKNOWN_TOPIC_OR_PARTITION = 3
UNKNOWN_TOPIC_ID = 100
INCONSISTENT_TOPIC_ID = 103
FETCH_SESSION_TOPIC_ID_ERROR = 106


class Fetcher:
    """Fetch requests of one version on one connection, with a session's id and epoch."""

    def __init__(self, client: wire.WireClient, version: int, topic_id: uuid.UUID) -> None:
        self.client, self.version, self.topic_id = client, version, topic_id

    def fetch(self, session_id: int, epoch: int, offsets: dict[int, int], forgotten=(), topic_id=None,
              isolation: int = 0) -> dict:
        topic = {"topic": TOPIC, "topic_id": topic_id or self.topic_id}
        return self.client.request("Fetch", self.version, {
            "replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": isolation,
            "session_id": session_id, "session_epoch": epoch, "rack_id": "",
            "topics": [{**topic, "partitions": [
                {"partition": p, "current_leader_epoch": -1, "fetch_offset": o, "last_fetched_epoch": -1,
                 "log_start_offset": -1, "partition_max_bytes": 1 << 20} for p, o in offsets.items()]}] if offsets else [],
            "forgotten_topics_data": [{**topic, "partitions": list(forgotten)}] if forgotten else []})


def offsets_listed(response: dict) -> dict[int, tuple[int, int, int]]:
    """{partition: (high watermark, last stable offset, log start offset)} of a response."""
    return {p["partition_index"]: (p["high_watermark"], p["last_stable_offset"], p["log_start_offset"])
            for t in response["responses"] for p in t["partitions"]}


def listed(response: dict) -> dict[int, tuple[int, int]]:
    """{partition: (high watermark, bytes of records)} of a response."""
    return {p["partition_index"]: (p["high_watermark"], len(p["records"] or b""))
            for t in response["responses"] for p in t["partitions"]}


def produce_to(c: wire.WireClient, partition: int, n: int = 1) -> None:
    r = c.request("Produce", 9, {"transactional_id": None, "acks": -1, "timeout_ms": 5000, "topic_data": [
        {"name": TOPIC, "partition_data": [{"index": partition, "records": build_batch([(None, b"v")] * n)}]}]})
    assert r["responses"][0]["partition_responses"][0]["error_code"] == 0


def topic_id(c: wire.WireClient) -> uuid.UUID:
    r = c.request("Metadata", 12, {"topics": [{"name": TOPIC, "topic_id": uuid.UUID(int=0)}],
                                   "allow_auto_topic_creation": False, "include_topic_authorized_operations": False})
    return r["topics"][0]["topic_id"]


@pytest.mark.parametrize("version", [12, 13, 17])
def test_incremental_fetches_list_only_partitions_with_news(broker, version):
    create_topic(broker.bootstrap, TOPIC, partitions=3)
    with wire.WireClient(broker.port) as c:
        for p in range(3):
            produce_to(c, p)
        f = Fetcher(c, version, topic_id(c))
        full = f.fetch(0, 0, {0: 0, 1: 0, 2: 0})
        session = full["session_id"]
        assert full["error_code"] == 0 and session != 0
        assert listed(full) == {0: (1, listed(full)[0][1]), 1: (1, listed(full)[1][1]), 2: (1, listed(full)[2][1])}
        # the client moves its positions past what it got: nothing new, nothing listed
        assert listed(f.fetch(session, 1, {0: 1, 1: 1, 2: 1})) == {}
        assert listed(f.fetch(session, 2, {})) == {}
        produce_to(c, 1, 3)
        news = f.fetch(session, 3, {})
        assert news["session_id"] == session and list(listed(news)) == [1] and listed(news)[1][0] == 4
        assert listed(f.fetch(session, 4, {1: 4})) == {}
        # a forgotten partition is no longer read; one added later is listed at once
        assert listed(f.fetch(session, 5, {}, forgotten=[2])) == {}
        produce_to(c, 2)
        assert listed(f.fetch(session, 6, {})) == {}
        assert list(listed(f.fetch(session, 7, {2: 0}))) == [2]
        # wrong epochs and unknown sessions, as Kafka answers them
        for epoch in (7, 9):
            r = f.fetch(session, epoch, {})
            assert (r["error_code"], r["session_id"], r["responses"]) == (INVALID_FETCH_SESSION_EPOCH, 0, [])
        assert f.fetch(session + 1, 1, {})["error_code"] == FETCH_SESSION_ID_NOT_FOUND
        other = Fetcher(c, 12 if version >= 13 else 13, f.topic_id)
        assert other.fetch(session, 8, {})["error_code"] == FETCH_SESSION_TOPIC_ID_ERROR
        assert f.fetch(session, 8, {})["error_code"] == 0, "a refused request leaves the session as it was"
        # FINAL (-1) closes the session and is answered sessionless
        final = f.fetch(session, -1, {0: 1})
        assert final["session_id"] == 0 and list(listed(final)) == [0]
        assert f.fetch(session, 9, {})["error_code"] == FETCH_SESSION_ID_NOT_FOUND


def test_a_named_partition_is_read_unless_its_client_is_at_the_end_it_was_told(broker):
    """An incremental fetch leaves a partition it names unread only when the client's position is the high
    watermark it was last told and the log has not moved since: a position named there after new records
    came, or below it (a seek back), gets records."""
    create_topic(broker.bootstrap, TOPIC, partitions=3)
    with wire.WireClient(broker.port) as c:
        for p in range(3):
            produce_to(c, p, 2)
        f = Fetcher(c, 13, topic_id(c))
        session = f.fetch(0, 0, {0: 0, 1: 0, 2: 0})["session_id"]
        assert session and listed(f.fetch(session, 1, {0: 2, 1: 2, 2: 2})) == {}
        produce_to(c, 0, 3)
        assert listed(f.fetch(session, 2, {0: 2, 1: 2})) == {0: (5, listed(f.fetch(session, 3, {0: 2}))[0][1])}
        assert listed(f.fetch(session, 4, {0: 5, 1: 2})) == {}
        seek_back = listed(f.fetch(session, 5, {1: 1, 2: 2}))
        assert list(seek_back) == [1] and seek_back[1][0] == 2 and seek_back[1][1] > 0
        produce_to(c, 2)
        news = listed(f.fetch(session, 6, {1: 2}))
        assert list(news) == [2] and news[2][0] == 3 and news[2][1] > 0
        assert listed(f.fetch(session, 7, {2: 3})) == {}, "named at the end it was told: nothing to list"


def test_offsets_that_move_without_records_for_the_client_are_listed(broker):
    """An incremental fetch reads only the session's partitions whose logs changed; a change the client gets
    no records for is still listed (Kafka's maybeUpdateResponseData): DeleteRecords moves a log start
    offset, and a read_committed client sees an open transaction move the high watermark but not the last
    stable offset, then the commit move both."""
    create_topic(broker.bootstrap, TOPIC, partitions=50)
    with wire.WireClient(broker.port) as c:
        for p in range(50):
            produce_to(c, p, 2)
        f = Fetcher(c, 13, topic_id(c))
        session = f.fetch(0, 0, {p: 0 for p in range(50)}, isolation=1)["session_id"]
        assert session and listed(f.fetch(session, 1, {p: 2 for p in range(50)}, isolation=1)) == {}
        r = c.request("DeleteRecords", 2, {"topics": [{"name": TOPIC, "partitions": [
            {"partition_index": 7, "offset": 1}]}], "timeout_ms": 5000})
        assert r["topics"][0]["partitions"][0]["error_code"] == 0
        assert offsets_listed(f.fetch(session, 2, {}, isolation=1)) == {7: (2, 2, 1)}
        assert listed(f.fetch(session, 3, {}, isolation=1)) == {}

        txn, errors = producer(broker.bootstrap, **{"transactional.id": "sessions-open"})
        txn.init_transactions(30)
        txn.begin_transaction()
        txn.produce(TOPIC, value=b"pending", partition=33)
        flush(txn)
        news = f.fetch(session, 4, {}, isolation=1)
        assert offsets_listed(news) == {33: (3, 2, 0)} and listed(news)[33][1] == 0, "no records past the LSO"
        txn.commit_transaction(30)
        epoch, deadline = 5, time.monotonic() + 30
        while not listed(news := f.fetch(session, epoch, {}, isolation=1)) and time.monotonic() < deadline:
            epoch += 1  # the commit marker is written after EndTxn is answered
            time.sleep(0.05)
        assert offsets_listed(news) == {33: (4, 4, 0)} and listed(news)[33][1] > 0
        assert listed(f.fetch(session, epoch + 1, {33: 4}, isolation=1)) == {}
        assert not errors


def test_a_full_fetch_replaces_the_session_it_names_and_topic_ids_are_checked(broker):
    create_topic(broker.bootstrap, TOPIC, partitions=1)
    with wire.WireClient(broker.port) as c:
        f = Fetcher(c, 13, topic_id(c))
        first = f.fetch(0, 0, {0: 0})["session_id"]
        second = f.fetch(first, 0, {0: 0})["session_id"]
        assert second not in (0, first)
        assert f.fetch(first, 1, {})["error_code"] == FETCH_SESSION_ID_NOT_FOUND
        unknown = uuid.uuid4()
        r = f.fetch(second, 1, {0: 0}, topic_id=unknown)
        errors = {(t["topic_id"], p["partition_index"]): p["error_code"] for t in r["responses"] for p in t["partitions"]}
        assert errors == {(unknown, 0): UNKNOWN_TOPIC_ID}


def errors_of(response: dict) -> dict[tuple[uuid.UUID, int], int]:
    return {(t["topic_id"], p["partition_index"]): p["error_code"] for t in response["responses"] for p in t["partitions"]}


def test_topic_ids_that_no_longer_name_the_topic(broker):
    """KIP-516: a partition a v13+ fetch names by a known id but that does not exist is
    UNKNOWN_TOPIC_OR_PARTITION; after the topic is deleted and created again under the same name, a
    session still holding the old id gets INCONSISTENT_TOPIC_ID, and a fetch naming the old id
    UNKNOWN_TOPIC_ID (as Kafka: the session resolved the name, the request cannot)."""
    create_topic(broker.bootstrap, TOPIC, partitions=1)
    with wire.WireClient(broker.port) as c:
        old_id = topic_id(c)
        f = Fetcher(c, 13, old_id)
        assert errors_of(f.fetch(0, -1, {0: 0, 5: 0})) == {(old_id, 0): 0, (old_id, 5): UNKNOWN_TOPIC_OR_PARTITION}
        session = f.fetch(0, 0, {0: 0})["session_id"]
        r = c.request("DeleteTopics", 6, {"topics": [{"name": TOPIC, "topic_id": uuid.UUID(int=0)}], "timeout_ms": 10000})
        assert r["responses"][0]["error_code"] == 0
        create_topic(broker.bootstrap, TOPIC, partitions=1)
        new_id = topic_id(c)
        assert new_id != old_id
        r = f.fetch(session, 1, {})
        assert r["error_code"] == 0 and errors_of(r) == {(old_id, 0): INCONSISTENT_TOPIC_ID}
        assert errors_of(f.fetch(0, -1, {0: 0})) == {(old_id, 0): UNKNOWN_TOPIC_ID}
        assert errors_of(f.fetch(0, -1, {0: 0}, topic_id=new_id)) == {(new_id, 0): 0}


def test_cache_slots_limit_sessions(start_broker):
    """Sessions younger than two minutes are never evicted by clients: past the slots, fetches go sessionless."""
    b = start_broker({"max.incremental.fetch.session.cache.slots": 2})
    create_topic(b.bootstrap, TOPIC, partitions=2)
    with wire.WireClient(b.port) as c:
        f = Fetcher(c, 12, uuid.UUID(int=0))
        sessions = [f.fetch(0, 0, {0: 0, 1: 0})["session_id"] for _ in range(3)]
        assert sessions[0] and sessions[1] and sessions[2] == 0
        assert f.fetch(sessions[0], 1, {})["error_code"] == 0
        assert f.fetch(sessions[0], -1, {})["session_id"] == 0  # closing one frees its slot
        assert f.fetch(0, 0, {0: 0})["session_id"] != 0
    off = start_broker({"max.incremental.fetch.session.cache.slots": 0})
    create_topic(off.bootstrap, TOPIC, partitions=1)
    with wire.WireClient(off.port) as c:
        assert Fetcher(c, 12, uuid.UUID(int=0)).fetch(0, 0, {0: 0})["session_id"] == 0


def fetch_requests_through(relay: CaptureRelay) -> list[tuple[int, dict]]:
    found = []
    for frame in relay.frames:
        payload = frame[4:]
        if struct.unpack_from(">h", payload)[0] == frames.API_KEYS["Fetch"]:
            header = frames.decode_request_header(payload)
            request, _ = codec.decode("FetchRequest", header.api_version, payload, header.body_offset)
            found.append((header.api_version, request))
    return found


def follow_with_java(start_broker, tmp_path, partitions: int, rounds: list[list[int]]) -> list[dict]:
    """A Java consumer of every partition from the beginning while ``rounds`` of records go to the partitions
    each names, two seconds apart once it fetches; asserts it got each record once, in order. The Fetch requests it sent."""
    _, relay, bootstrap = broker_behind_relay(start_broker)
    create_topic(bootstrap, TOPIC, partitions=partitions)
    p, _ = producer(bootstrap)
    sent = {part: [] for part in range(partitions)}

    def produce_round(r: int) -> None:
        for part in rounds[r]:
            value = f"{r}-{part}".encode()
            p.produce(TOPIC, value=value, partition=part)
            sent[part].append(value)
        flush(p)

    produce_round(0)
    java = JavaClients.build(tmp_path)
    result: dict = {}
    total = sum(map(len, rounds))
    follower = threading.Thread(target=lambda: result.update(lines=java.run(bootstrap, "follow", TOPIC, partitions,
                                                                              total)))
    follower.start()
    deadline = time.monotonic() + 60  # the JVM's start: the rounds must come while the consumer fetches
    while not fetch_requests_through(relay) and follower.is_alive() and time.monotonic() < deadline:
        time.sleep(0.2)
    for r in range(1, len(rounds)):
        time.sleep(2)
        produce_round(r)
    follower.join(150)
    relay.close()
    assert "lines" in result, "the Java consumer did not finish"
    got = {part: [] for part in range(partitions)}
    for line in every(result["lines"], "record"):
        got[line["partition"]].append(bytes.fromhex(line["value"]))
    assert got == sent
    return [r for _, r in fetch_requests_through(relay)]


@pytest.mark.timeout(180)
def test_java_consumer_follows_many_partitions_in_one_session(start_broker, tmp_path):
    fetches = follow_with_java(start_broker, tmp_path, 20, [list(range(20))] * 4)
    incremental = [r for r in fetches if r["session_id"] and r["session_epoch"] > 0]
    assert incremental, f"the Java consumer never sent an incremental fetch ({len(fetches)} fetches)"
    assert any(sum(len(t["partitions"]) for t in r["topics"]) < 20 for r in incremental)


@pytest.mark.timeout(180)
def test_java_consumer_of_many_partitions_while_few_change(start_broker, tmp_path):
    """Incremental fetches read only the partitions whose logs changed: records that arrive in a few of 300
    partitions of a settled session each reach the Java consumer once."""
    fetches = follow_with_java(start_broker, tmp_path, 300,
                               [list(range(300)), [5], [17, 290], [5, 100, 299], [42], [299, 0]])
    assert any(r["session_id"] and r["session_epoch"] > 1 for r in fetches)


def test_librdkafka_fetches_sessionless(start_broker):
    _, relay, bootstrap = broker_behind_relay(start_broker)
    create_topic(bootstrap, TOPIC, partitions=2)
    p, _ = producer(bootstrap)
    for part in (0, 1):
        p.produce(TOPIC, value=b"x", partition=part)
    flush(p)
    c, errors = consumer(bootstrap)
    try:
        c.assign([TopicPartition(TOPIC, part, OFFSET_BEGINNING) for part in (0, 1)])
        consume_until(c, TOPIC, {0: 1, 1: 1}, timeout=30, errors=errors)
    finally:
        c.close()
    relay.close()
    fetches = fetch_requests_through(relay)
    assert fetches and all((r["session_id"], r["session_epoch"]) == (0, -1) for _, r in fetches)
