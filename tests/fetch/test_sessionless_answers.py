"""A sessionless consumer fetch (epoch -1, librdkafka's every fetch) answers partitions with nothing new from
encoded answers kept per partition (broker/fetch/log_read.py IdleAnswers, protocol/fetch_answers.py); a full fetch
the broker cannot open a session for (no cache slots) takes the general path. Both must answer byte for byte
alike, for every partition state and version, before and after the states change. (The encoded answers of
every version against the codec's: tests/protocol/test_fetch_answers.py.)"""

from __future__ import annotations

import uuid

from helpers import txn_wire, wire
from protocol import frames
from protocol.records import build_batch

TOPIC, TXN_TOPIC = "idle", "idle-txn"
PARTITIONS = 6


def fetch_frame(version: int, epoch: int, topics: dict[str, uuid.UUID], offsets: dict[str, dict[int, int]],
                isolation: int, leader_epoch: int = -1) -> bytes:
    return frames.encode_request("Fetch", version, 7, "idle-test", {
        "replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": isolation,
        "session_id": 0, "session_epoch": epoch, "forgotten_topics_data": [], "rack_id": "",
        "topics": [{"topic": name, "topic_id": topics.get(name, uuid.UUID(int=1)), "partitions": [
            {"partition": p, "current_leader_epoch": leader_epoch, "fetch_offset": o, "last_fetched_epoch": -1,
             "log_start_offset": -1, "partition_max_bytes": 1 << 20} for p, o in wanted.items()]}
            for name, wanted in offsets.items()]})


def answer(sock, request: bytes) -> bytes:
    sock.sendall(request)
    return wire.recv_frame(sock)


def topic_ids(c: wire.WireClient) -> dict[str, uuid.UUID]:
    r = c.request("Metadata", 12, {"topics": None, "allow_auto_topic_creation": False,
                                   "include_topic_authorized_operations": False})
    return {t["name"]: t["topic_id"] for t in r["topics"]}


def test_sessionless_fetch_answers_as_the_general_path(start_broker):
    broker = start_broker(max_incremental_fetch_session_cache_slots=0)
    with wire.WireClient(broker.port) as c:
        txn_wire.create_topic(c, TOPIC, PARTITIONS)
        txn_wire.create_topic(c, TXN_TOPIC, 2)
        for p in (1, 2, 3, 4):  # 0 stays empty
            assert txn_wire.produce(c, TOPIC, build_batch([(None, b"a"), (None, b"b"), (None, b"c")]),
                                    partition=p) == 0
        r = c.request("DeleteRecords", 2, {"topics": [{"name": TOPIC, "partitions": [
            {"partition_index": 2, "offset": 2}]}], "timeout_ms": 5000})
        assert r["topics"][0]["partitions"][0]["error_code"] == 0
        assert txn_wire.produce(c, TXN_TOPIC, build_batch([(None, b"done")]), partition=0) == 0
        txn = txn_wire.begin(c, "idle-open", TXN_TOPIC, [0, 1])
        assert txn_wire.produce(c, TXN_TOPIC, txn_wire.txn_batch(txn, 0, b"open"), "idle-open", partition=0) == 0
        ids = topic_ids(c)

        # at the end (idle), before it (records), past it (out of range), an unknown partition and topic
        states = {TOPIC: {0: 0, 1: 3, 2: 3, 3: 1, 4: 9, PARTITIONS: 0}, TXN_TOPIC: {0: 2, 1: 0}, "absent": {0: 0}}
        sock = wire.connect(broker.port)
        try:
            def compare(version: int, isolation: int, leader_epoch: int = -1) -> None:
                args = (ids, states, isolation, leader_epoch)
                general = answer(sock, fetch_frame(version, 0, *args))
                for _ in range(2):  # found, then kept
                    assert answer(sock, fetch_frame(version, -1, *args)) == general, (version, isolation)
                decoded = frames.decode_response("Fetch", version, general)[1]
                assert len([p for t in decoded["responses"] for p in t["partitions"]]) == 9

            for version in (7, 11, 12, 13, 16, 17):  # (before v7 every fetch is sessionless)
                for isolation in (0, 1):
                    compare(version, isolation)
            compare(12, 0, leader_epoch=0)
            compare(12, 0, leader_epoch=3)  # a leader epoch this leader has not reached
            before = answer(sock, fetch_frame(12, -1, ids, states, 1))

            # the kept answers follow their logs: an append, a moved log start, a transaction's end
            assert txn_wire.produce(c, TOPIC, build_batch([(None, b"d")]), partition=0) == 0
            r = c.request("DeleteRecords", 2, {"topics": [{"name": TOPIC, "partitions": [
                {"partition_index": 3, "offset": 3}]}], "timeout_ms": 5000})
            assert r["topics"][0]["partitions"][0]["error_code"] == 0
            assert txn_wire.end_txn(c, txn, committed=True) == 0
            txn_wire.wait_for(lambda: txn_wire.lso(c, TXN_TOPIC) == 3, "the transaction's marker")
            for version in (11, 12, 13):
                for isolation in (0, 1):
                    compare(version, isolation)
            after = frames.decode_response("Fetch", 12, answer(sock, fetch_frame(12, -1, ids, states, 1)))[1]
            assert after != frames.decode_response("Fetch", 12, before)[1]
            moved = {(t["topic"], p["partition_index"]): (p["high_watermark"], p["last_stable_offset"],
                                                         p["log_start_offset"], len(p["records"] or b""))
                     for t in after["responses"] for p in t["partitions"]}
            assert moved[(TOPIC, 0)][:3] == (1, 1, 0) and moved[(TOPIC, 0)][3] > 0  # its new record
            assert moved[(TOPIC, 3)][:3] == (3, 3, 3)
            assert moved[(TXN_TOPIC, 0)][:2] == (3, 3)
        finally:
            sock.close()
