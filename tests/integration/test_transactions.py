"""Transactions: atomic writes across partitions, read_committed, fencing, timeouts, admin views.

Real clients (confluent-kafka, kafka-python, aiokafka) against a real broker
process; the raw-wire checks use tests/helpers/wire.py for what no client
library sends on purpose: a write to a partition outside the transaction, a
stale epoch, an out-of-range timeout. Crashes are in test_transactions_crash.py.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from helpers.kafka import COMMON, create_topic, make_messages, produce_all, read_partitions
from helpers.odd_requests import send_odd_requests
from helpers.txn_wire import wait_for
from helpers.wire import WireClient
from protocol.records import build_batch

NONE = 0
INVALID_PRODUCER_EPOCH = 47
INVALID_TXN_STATE = 48
INVALID_PRODUCER_ID_MAPPING = 49
INVALID_TRANSACTION_TIMEOUT = 50
CONCURRENT_TRANSACTIONS = 51
UNSTABLE_OFFSET_COMMIT = 88
PRODUCER_FENCED = 90
TRANSACTIONAL_ID_NOT_FOUND = 105

READ_UNCOMMITTED, READ_COMMITTED = 0, 1
DEADLINE_S = 30


# --- clients ---------------------------------------------------------------------


def txn_producer(bootstrap: str, transactional_id: str, **config) -> Producer:
    producer = Producer({"bootstrap.servers": bootstrap, "broker.address.family": "v4", "log.connection.close": False,
                         "transactional.id": transactional_id, "linger.ms": 5, **config})
    producer.init_transactions(DEADLINE_S)
    return producer


def read(bootstrap: str, tps: list[tuple[str, int]], isolation: str, *, until: dict | None = None,
         seconds: float | None = None) -> dict[tuple[str, int], list[tuple[int, bytes]]]:
    """(offset, value) per partition from offset 0: until each position reaches ``until``, or for ``seconds``."""
    c = Consumer({**COMMON, "bootstrap.servers": bootstrap, "group.id": "txn-reader", "isolation.level": isolation,
                  "enable.auto.commit": False})
    got: dict[tuple[str, int], list[tuple[int, bytes]]] = {tp: [] for tp in tps}
    try:
        c.assign([TopicPartition(t, p, 0) for t, p in tps])
        deadline = time.monotonic() + (seconds if seconds is not None else DEADLINE_S)
        while time.monotonic() < deadline:
            for m in c.consume(num_messages=1000, timeout=0.2):
                assert m.error() is None, f"consumer error: {m.error()}"
                got[(m.topic(), m.partition())].append((m.offset(), m.value()))
            if until is not None:
                positions = {(tp.topic, tp.partition): tp.offset for tp in c.position(
                    [TopicPartition(t, p) for t, p in tps])}
                if all(positions[tp] >= end for tp, end in until.items()):
                    return got
        assert until is None, f"{isolation} reader did not reach {until} within the deadline; got {got}"
        return got
    finally:
        c.close()


def values(records: list[tuple[int, bytes]]) -> list[bytes]:
    return [v for _, v in records]


def list_offset(c: WireClient, topic: str, partition: int, isolation: int) -> int:
    r = c.request("ListOffsets", 7, {"replica_id": -1, "isolation_level": isolation, "topics": [
        {"name": topic, "partitions": [{"partition_index": partition, "current_leader_epoch": -1, "timestamp": -1}]}]})
    return r["topics"][0]["partitions"][0]["offset"]


def fetch(c: WireClient, topic: str, partition: int, offset: int, isolation: int) -> dict:
    want = {"partition": partition, "fetch_offset": offset, "partition_max_bytes": 1 << 20}
    r = c.request("Fetch", 12, {"max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": isolation,
                                "topics": [{"topic": topic, "partitions": [want]}]})
    return r["responses"][0]["partitions"][0]


# --- atomic visibility -------------------------------------------------------------


def test_a_commit_shows_every_partition_of_the_transaction_at_once(broker):
    create_topic(broker.bootstrap, "atomic-a", partitions=2)
    create_topic(broker.bootstrap, "atomic-b", partitions=1)
    tps = [("atomic-a", 0), ("atomic-a", 1), ("atomic-b", 0)]
    p = txn_producer(broker.bootstrap, "atomic")
    p.begin_transaction()
    sent = {tp: [b"%s-%d-%d" % (tp[0].encode(), tp[1], i) for i in range(5)] for tp in tps}
    for (topic, partition), vals in sent.items():
        for v in vals:
            p.produce(topic, value=v, partition=partition)
    p.flush(DEADLINE_S)
    assert read(broker.bootstrap, tps, "read_committed", seconds=1.5) == {tp: [] for tp in tps}, (
        "nothing of an open transaction is visible")
    with WireClient(broker.port) as c:
        assert [list_offset(c, *tp, READ_COMMITTED) for tp in tps] == [0, 0, 0]
        assert [list_offset(c, *tp, READ_UNCOMMITTED) for tp in tps] == [5, 5, 5]

    p.commit_transaction(DEADLINE_S)
    got = read(broker.bootstrap, tps, "read_committed", until=dict.fromkeys(tps, 6))
    assert {tp: values(r) for tp, r in got.items()} == sent
    assert all([o for o, _ in r] == list(range(5)) for r in got.values())


def test_an_abort_hides_records_from_read_committed_only(broker):
    create_topic(broker.bootstrap, "aborts", partitions=1)
    tp = ("aborts", 0)
    p = txn_producer(broker.bootstrap, "aborter")
    for outcome in ("commit", "abort", "commit"):
        p.begin_transaction()
        for i in range(3):
            p.produce(tp[0], value=f"{outcome}-{i}".encode(), partition=0)
        p.flush(DEADLINE_S)
        p.commit_transaction(DEADLINE_S) if outcome == "commit" else p.abort_transaction(DEADLINE_S)

    every = read(broker.bootstrap, [tp], "read_uncommitted", until={tp: 12})[tp]
    # each transaction's marker takes an offset: 3, 7 and 11
    assert [o for o, _ in every] == [0, 1, 2, 4, 5, 6, 8, 9, 10]
    assert values(every) == [f"{o}-{i}".encode() for o in ("commit", "abort", "commit") for i in range(3)]
    committed = read(broker.bootstrap, [tp], "read_committed", until={tp: 12})[tp]
    assert committed == [(o, v) for o, v in every if not v.startswith(b"abort")]
    with WireClient(broker.port) as c:
        assert list_offset(c, *tp, READ_COMMITTED) == list_offset(c, *tp, READ_UNCOMMITTED) == 12
        state = c.request("DescribeTransactions", 0, {"transactional_ids": ["aborter"]})["transaction_states"][0]
        part = fetch(c, *tp, 0, READ_COMMITTED)
        assert part["aborted_transactions"] == [{"producer_id": state["producer_id"], "first_offset": 4}]
        assert fetch(c, *tp, 0, READ_UNCOMMITTED)["aborted_transactions"] is None


def test_read_partitions_reaches_an_end_that_is_a_marker(broker):
    # the shared reader stops at its position: a marker, never handed to the application, may be last
    create_topic(broker.bootstrap, "ends-in-marker", partitions=1)
    p = txn_producer(broker.bootstrap, "ends-in-marker")
    p.begin_transaction()
    p.produce("ends-in-marker", value=b"only", partition=0)
    p.commit_transaction(DEADLINE_S)
    with WireClient(broker.port) as c:  # the marker follows the answer to EndTxn
        wait_for(lambda: list_offset(c, "ends-in-marker", 0, READ_COMMITTED) == 2, "the commit marker at 1")
    for isolation in ("read_committed", "read_uncommitted"):
        got, marks = read_partitions(broker.bootstrap, "ends-in-marker", [0], timeout=15, isolation_level=isolation)
        assert marks[0] == (0, 2) and [(offset, value) for offset, _, value, *_ in got[0]] == [(0, b"only")]


def test_an_open_transaction_holds_read_committed_readers_at_the_last_stable_offset(broker):
    create_topic(broker.bootstrap, "lso", partitions=1)
    tp = ("lso", 0)
    plain = make_messages(4, 1, edge_cases=False)
    produce_all(broker.bootstrap, "lso", plain[:2])  # offsets 0-1
    p = txn_producer(broker.bootstrap, "lso-holder")
    p.begin_transaction()
    p.produce("lso", value=b"txn-0", partition=0)
    p.produce("lso", value=b"txn-1", partition=0)
    p.flush(DEADLINE_S)  # offsets 2-3
    produce_all(broker.bootstrap, "lso", plain[2:])  # offsets 4-5, after the open transaction
    with WireClient(broker.port) as c:
        assert (list_offset(c, *tp, READ_COMMITTED), list_offset(c, *tp, READ_UNCOMMITTED)) == (2, 6)
        part = fetch(c, *tp, 0, READ_COMMITTED)
        assert (part["high_watermark"], part["last_stable_offset"], part["aborted_transactions"]) == (6, 2, [])
        assert fetch(c, *tp, 2, READ_COMMITTED)["records"] in (b"", None), "nothing from the LSO on"
    assert [o for o, _ in read(broker.bootstrap, [tp], "read_uncommitted", until={tp: 6})[tp]] == list(range(6))
    assert [o for o, _ in read(broker.bootstrap, [tp], "read_committed", seconds=1.5)[tp]] == [0, 1]

    p.commit_transaction(DEADLINE_S)  # answered at PrepareCommit: the marker follows
    with WireClient(broker.port) as c:
        wait_for(lambda: list_offset(c, *tp, READ_UNCOMMITTED) == 7, "the commit marker at 6")
        assert list_offset(c, *tp, READ_COMMITTED) == 7, "the marker at 6 ends it"
    got = read(broker.bootstrap, [tp], "read_committed", until={tp: 7})[tp]
    assert [o for o, _ in got] == list(range(6))


# --- fencing and timeouts ------------------------------------------------------------


def test_a_new_producer_fences_the_old_one_and_aborts_its_transaction(broker):
    create_topic(broker.bootstrap, "zombie", partitions=1)
    tp = ("zombie", 0)
    old = txn_producer(broker.bootstrap, "zombie-app")
    old.begin_transaction()
    for i in range(3):
        old.produce("zombie", value=b"zombie-%d" % i, partition=0)
    old.flush(DEADLINE_S)

    new = txn_producer(broker.bootstrap, "zombie-app")  # the coordinator aborts the open transaction first
    new.begin_transaction()
    new.produce("zombie", value=b"new", partition=0)
    new.commit_transaction(DEADLINE_S)

    with pytest.raises(KafkaException) as fenced:
        old.commit_transaction(10)
    assert fenced.value.args[0].fatal(), f"the old producer must be fenced for good, got {fenced.value}"
    assert values(read(broker.bootstrap, [tp], "read_committed", until={tp: 6})[tp]) == [b"new"]
    assert values(read(broker.bootstrap, [tp], "read_uncommitted", until={tp: 6})[tp]) == [
        b"zombie-0", b"zombie-1", b"zombie-2", b"new"]
    assert broker.wait_for_log(r"aborting the open transaction of <transaction zombie-app Ongoing")


def test_a_hung_transaction_is_aborted_after_its_timeout(start_broker):
    b = start_broker({"transaction.abort.timed.out.transaction.cleanup.interval.ms": 200})
    create_topic(b.bootstrap, "hung", partitions=1)
    tp = ("hung", 0)
    hung = txn_producer(b.bootstrap, "hung-app", **{"transaction.timeout.ms": 3000})
    hung.begin_transaction()
    began = time.monotonic()
    for i in range(3):
        hung.produce("hung", value=b"hung-%d" % i, partition=0)
    hung.flush(DEADLINE_S)
    other = txn_producer(b.bootstrap, "after-hung")
    other.begin_transaction()
    other.produce("hung", value=b"after", partition=0)
    other.commit_transaction(DEADLINE_S)  # offsets 3 and its marker 4, behind the open transaction

    with WireClient(b.port) as c:
        wait_for(lambda: list_offset(c, *tp, READ_UNCOMMITTED) == 5, "the commit marker at 4")
        assert list_offset(c, *tp, READ_COMMITTED) == 0
        while list_offset(c, *tp, READ_COMMITTED) == 0:
            assert time.monotonic() - began < 15, "the coordinator never aborted the transaction"
            time.sleep(0.1)
        assert time.monotonic() - began > 2.5, "aborted before its 3 s timeout"
        assert list_offset(c, *tp, READ_COMMITTED) == 6, "the abort marker at 5 ends it"

        def state() -> dict:
            return c.request("DescribeTransactions", 0, {"transactional_ids": ["hung-app"]})["transaction_states"][0]

        wait_for(lambda: state()["transaction_state"] != "PrepareAbort", "CompleteAbort after the marker")
        assert (state()["transaction_state"], state()["producer_epoch"]) == ("CompleteAbort", 1), "aborted with a bump"
    assert values(read(b.bootstrap, [tp], "read_committed", until={tp: 6})[tp]) == [b"after"]
    with pytest.raises(KafkaException) as fenced:
        hung.commit_transaction(10)
    assert fenced.value.args[0].fatal(), f"the timed-out producer is fenced, got {fenced.value}"


# --- other clients -----------------------------------------------------------------


def test_kafka_python_commits_and_aborts(broker):
    from kafka import KafkaProducer

    create_topic(broker.bootstrap, "kp-txn", partitions=2)
    p = KafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id="kafka-python-txn")
    try:
        p.init_transactions()
        for outcome in ("commit", "abort", "commit"):
            p.begin_transaction()
            for partition in (0, 1):
                p.send("kp-txn", f"{outcome}-{partition}".encode(), partition=partition)
            p.flush(timeout=DEADLINE_S)  # so that the aborted records are written, not just dropped
            p.commit_transaction() if outcome == "commit" else p.abort_transaction()
    finally:
        p.close(timeout=10)
    tps = [("kp-txn", 0), ("kp-txn", 1)]
    got = read(broker.bootstrap, tps, "read_committed", until=dict.fromkeys(tps, 6))
    assert {tp: values(r) for tp, r in got.items()} == {tp: [b"commit-%d" % tp[1]] * 2 for tp in tps}


def test_aiokafka_commits_and_aborts(broker):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.structs import TopicPartition as AioTopicPartition

    create_topic(broker.bootstrap, "aio-txn", partitions=1)

    async def run() -> list[bytes]:
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id="aiokafka-txn")
        await producer.start()
        try:
            async with producer.transaction():
                await producer.send_and_wait("aio-txn", b"committed-1", partition=0)
            await producer.begin_transaction()
            await producer.send_and_wait("aio-txn", b"aborted", partition=0)
            await producer.abort_transaction()
            async with producer.transaction():
                await producer.send_and_wait("aio-txn", b"committed-2", partition=0)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, isolation_level="read_committed",
                                    auto_offset_reset="earliest", enable_auto_commit=False)
        await consumer.start()
        try:
            tp = AioTopicPartition("aio-txn", 0)
            consumer.assign([tp])
            got: list[bytes] = []
            deadline = time.monotonic() + DEADLINE_S
            while await consumer.position(tp) < 6 and time.monotonic() < deadline:
                for records in (await consumer.getmany(timeout_ms=200)).values():
                    got += [r.value for r in records]
            return got
        finally:
            await consumer.stop()

    assert asyncio.run(run()) == [b"committed-1", b"committed-2"]


def test_admin_clients_see_the_transaction_state(broker):
    from kafka import TopicPartition as KTopicPartition
    from kafka.admin import KafkaAdminClient
    from kafka.admin._transactions import AbortTransactionSpec, TransactionState
    from kafka.errors import TransactionalIdNotFoundError

    create_topic(broker.bootstrap, "admin-txn", partitions=2)
    p = txn_producer(broker.bootstrap, "admin-app", **{"transaction.timeout.ms": 45000})
    p.begin_transaction()
    started = time.time() * 1000
    for partition in (0, 1):
        p.produce("admin-txn", value=b"x", partition=partition)
    p.flush(DEADLINE_S)
    tps = {KTopicPartition("admin-txn", 0), KTopicPartition("admin-txn", 1)}
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=10000)
    try:
        (listed,) = [t for t in admin.list_transactions()[1] if t.transactional_id == "admin-app"]
        assert listed.state == TransactionState.ONGOING
        pid = listed.producer_id
        assert [t.transactional_id for t in admin.list_transactions(state_filters=["Ongoing"])[1]] == ["admin-app"]
        assert admin.list_transactions(state_filters=["CompleteCommit"])[1] == []
        assert admin.list_transactions(producer_id_filters=[pid + 1])[1] == []
        assert [t.transactional_id for t in admin.list_transactions(duration_filter_ms=0)[1]] == ["admin-app"]
        open_txn = admin.describe_transactions(["admin-app"])["admin-app"]
        assert (open_txn.state, open_txn.producer_id, open_txn.producer_epoch, open_txn.transaction_timeout_ms,
                open_txn.topic_partitions) == (TransactionState.ONGOING, pid, 0, 45000, tps)
        assert abs(open_txn.transaction_start_time_ms - started) < 10_000
        (producer,) = admin.describe_producers([KTopicPartition("admin-txn", 1)])[
            KTopicPartition("admin-txn", 1)].active_producers
        assert (producer.producer_id, producer.current_transaction_start_offset) == (pid, 0)

        p.commit_transaction(DEADLINE_S)  # answered at PrepareCommit; CompleteCommit follows the markers
        wait_for(lambda: admin.describe_transactions(["admin-app"])["admin-app"].state != TransactionState.PREPARE_COMMIT,
                 "the commit markers are written")
        done = admin.describe_transactions(["admin-app"])["admin-app"]
        assert (done.state, done.topic_partitions) == (TransactionState.COMPLETE_COMMIT, set())
        (producer,) = admin.describe_producers([KTopicPartition("admin-txn", 1)])[
            KTopicPartition("admin-txn", 1)].active_producers
        assert (producer.current_transaction_start_offset, producer.coordinator_epoch) == (-1, 0)
        with pytest.raises(TransactionalIdNotFoundError):
            admin.describe_transactions(["no-such-app"])

        # the hanging-transaction tool: abort one partition's transaction without its coordinator
        hanging = txn_producer(broker.bootstrap, "hanging-app")
        hanging.begin_transaction()
        hanging.produce("admin-txn", value=b"hanging", partition=0)
        hanging.flush(DEADLINE_S)  # offset 2
        (state,) = [s for s in admin.describe_producers([KTopicPartition("admin-txn", 0)])[
            KTopicPartition("admin-txn", 0)].active_producers if s.current_transaction_start_offset == 2]
        with WireClient(broker.port) as c:
            assert list_offset(c, "admin-txn", 0, READ_COMMITTED) == 2
            admin.abort_transaction(AbortTransactionSpec(KTopicPartition("admin-txn", 0), state.producer_id,
                                                         state.producer_epoch, coordinator_epoch=-1))
            assert list_offset(c, "admin-txn", 0, READ_COMMITTED) == 4
    finally:
        admin.close()


# --- the wire ----------------------------------------------------------------------


def init_producer_id(c: WireClient, transactional_id: str, timeout_ms: int = 60000, version: int = 4) -> tuple:
    r = c.request("InitProducerId", version, {"transactional_id": transactional_id,
                                              "transaction_timeout_ms": timeout_ms,
                                              "producer_id": -1, "producer_epoch": -1})
    return r["error_code"], r["producer_id"], r["producer_epoch"]


def add_partitions(c: WireClient, txn: tuple, topic: str, partitions: list[int], version: int = 3) -> list[int]:
    r = c.request("AddPartitionsToTxn", version, {
        "v3_and_below_transactional_id": txn[0], "v3_and_below_producer_id": txn[1],
        "v3_and_below_producer_epoch": txn[2], "v3_and_below_topics": [{"name": topic, "partitions": partitions}]})
    return [p["partition_error_code"] for t in r["results_by_topic_v3_and_below"] for p in t["results_by_partition"]]


def end_txn(c: WireClient, txn: tuple, committed: bool, version: int = 3) -> int:
    return c.request("EndTxn", version, {"transactional_id": txn[0], "producer_id": txn[1], "producer_epoch": txn[2],
                                         "committed": committed})["error_code"]


def produce(c: WireClient, txn: tuple, topic: str, partition: int, seq: int, transactional_id="same") -> int:
    records = build_batch([(None, b"wire-%d" % seq)], producer_id=txn[1], producer_epoch=txn[2], base_sequence=seq,
                          transactional=True)
    r = c.request("Produce", 9, {"transactional_id": txn[0] if transactional_id == "same" else transactional_id,
                                 "acks": -1, "timeout_ms": 10000, "topic_data": [
                                     {"name": topic, "partition_data": [{"index": partition, "records": records}]}]})
    return r["responses"][0]["partition_responses"][0]["error_code"]


def offset_fetch(c: WireClient, group: str, topic: str) -> tuple[int, int]:
    r = c.request("OffsetFetch", 7, {"group_id": group, "require_stable": True,
                                     "topics": [{"name": topic, "partition_indexes": [0]}]})
    part = r["topics"][0]["partitions"][0]
    return part["error_code"], part["committed_offset"]


def test_the_wire_protocol_rules(broker):
    create_topic(broker.bootstrap, "wire-txn", partitions=2)
    with WireClient(broker.port) as c:
        assert init_producer_id(c, "wire", timeout_ms=900_001)[0] == INVALID_TRANSACTION_TIMEOUT
        assert init_producer_id(c, "wire", timeout_ms=0)[0] == INVALID_TRANSACTION_TIMEOUT
        code, pid, epoch = init_producer_id(c, "wire")
        assert (code, epoch) == (NONE, 0)
        txn = ("wire", pid, 0)

        assert add_partitions(c, txn, "wire-txn", [0]) == [NONE]
        assert add_partitions(c, txn, "wire-txn", [0, 7]) == [55, 3], "OPERATION_NOT_ATTEMPTED, UNKNOWN_TOPIC"
        assert produce(c, txn, "wire-txn", 1, 0) == INVALID_TXN_STATE, "partition 1 is not in the transaction"
        assert list_offset(c, "wire-txn", 1, READ_UNCOMMITTED) == 0, "and nothing was written"
        assert produce(c, txn, "wire-txn", 0, 0, transactional_id=None) == INVALID_TXN_STATE
        assert produce(c, ("wire", pid, 1), "wire-txn", 0, 0) == INVALID_PRODUCER_EPOCH, "not the current epoch"
        assert produce(c, txn, "wire-txn", 0, 0) == NONE
        verify = c.request("AddPartitionsToTxn", 4, {"transactions": [{
            "transactional_id": "wire", "producer_id": pid, "producer_epoch": 0, "verify_only": True,
            "topics": [{"name": "wire-txn", "partitions": [0, 1]}]}]})
        results = verify["results_by_transaction"][0]["topic_results"][0]["results_by_partition"]
        assert [r["partition_error_code"] for r in results] == [NONE, INVALID_TXN_STATE]

        commit = {"transactional_id": "wire", "group_id": "wire-group", "producer_id": pid, "producer_epoch": 0,
                  "generation_id": -1, "member_id": "", "group_instance_id": None,
                  "topics": [{"name": "wire-txn", "partitions": [
                      {"partition_index": 0, "committed_offset": 1, "committed_leader_epoch": -1,
                       "committed_metadata": ""}]}]}

        def txn_offset_commit(body: dict) -> int:
            return c.request("TxnOffsetCommit", 3, body)["topics"][0]["partitions"][0]["error_code"]

        assert txn_offset_commit(commit) == INVALID_TXN_STATE, "the group's offsets were not added"
        assert c.request("AddOffsetsToTxn", 3, {"transactional_id": "wire", "producer_id": pid, "producer_epoch": 0,
                                                "group_id": "wire-group"})["error_code"] == NONE
        assert txn_offset_commit({**commit, "producer_epoch": 1}) == INVALID_PRODUCER_EPOCH
        assert txn_offset_commit({**commit, "generation_id": 3}) == 22, "ILLEGAL_GENERATION"
        assert txn_offset_commit(commit) == NONE
        assert offset_fetch(c, "wire-group", "wire-txn") == (UNSTABLE_OFFSET_COMMIT, -1)

        # a new incarnation: the open transaction is aborted first, and the old epoch is fenced everywhere
        assert init_producer_id(c, "wire")[0] == CONCURRENT_TRANSACTIONS
        deadline = time.monotonic() + 10
        while (result := init_producer_id(c, "wire"))[0] == CONCURRENT_TRANSACTIONS:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert result == (NONE, pid, 2), "epoch 1 went to the abort that fenced epoch 0"
        assert end_txn(c, txn, committed=True) == PRODUCER_FENCED
        assert end_txn(c, txn, committed=True, version=1) == INVALID_PRODUCER_EPOCH, "before KIP-588"
        assert add_partitions(c, txn, "wire-txn", [1]) == [PRODUCER_FENCED]
        assert add_partitions(c, txn, "wire-txn", [1], version=1) == [INVALID_PRODUCER_EPOCH]
        assert end_txn(c, ("wire", pid + 1000, 2), committed=True) == INVALID_PRODUCER_ID_MAPPING
        assert produce(c, txn, "wire-txn", 0, 1) == INVALID_PRODUCER_EPOCH
        assert offset_fetch(c, "wire-group", "wire-txn") == (NONE, -1), "the aborted offset never counted"
        part = fetch(c, "wire-txn", 0, 0, READ_COMMITTED)
        assert part["aborted_transactions"] == [{"producer_id": pid, "first_offset": 0}]
        assert (part["last_stable_offset"], part["high_watermark"]) == (2, 2)

        # the next transaction commits its offset
        txn = ("wire", pid, 2)
        assert end_txn(c, txn, committed=True) == INVALID_TXN_STATE, "no transaction is open"
        assert add_partitions(c, txn, "wire-txn", [1]) == [NONE]
        assert produce(c, txn, "wire-txn", 1, 0) == NONE
        assert c.request("AddOffsetsToTxn", 3, {"transactional_id": "wire", "producer_id": pid, "producer_epoch": 2,
                                                "group_id": "wire-group"})["error_code"] == NONE
        assert txn_offset_commit({**commit, "producer_epoch": 2}) == NONE
        assert end_txn(c, txn, committed=True) == NONE
        deadline = time.monotonic() + 10
        while offset_fetch(c, "wire-group", "wire-txn") != (NONE, 1):
            assert time.monotonic() < deadline, "the committed offset never became visible"
            time.sleep(0.05)
        wait_for(lambda: c.request("DescribeTransactions", 0, {"transactional_ids": ["wire"]})[
            "transaction_states"][0]["transaction_state"] == "CompleteCommit", "CompleteCommit after the markers")
        assert end_txn(c, txn, committed=True) == NONE, "a retried commit"
        assert end_txn(c, txn, committed=False) == INVALID_TXN_STATE

        # markers from an older epoch than the partition has seen, in v0 (Kafka 3.x tools) and v1
        for version in (0, 1):
            stale = c.request("WriteTxnMarkers", version, {"markers": [{
                "producer_id": pid, "producer_epoch": 0, "transaction_result": True, "coordinator_epoch": 0,
                "topics": [{"name": "wire-txn", "partition_indexes": [0]}]}]})
            assert stale["markers"][0]["topics"][0]["partitions"][0]["error_code"] == INVALID_PRODUCER_EPOCH


def test_after_a_crash_open_transactions_time_out_and_idle_ids_expire(start_broker):
    """An Ongoing transaction found in __transaction_state after kill -9 is aborted on its timeout;
    an id unused for transactional.id.expiration.ms is removed, and stays removed across a restart."""
    b = start_broker({"transaction.abort.timed.out.transaction.cleanup.interval.ms": 100,
                      "transaction.remove.expired.transaction.cleanup.interval.ms": 100,
                      "transactional.id.expiration.ms": 3000})
    create_topic(b.bootstrap, "restart-txn", partitions=1)

    def describe(c: WireClient, transactional_id: str) -> dict:
        return c.request("DescribeTransactions", 0, {"transactional_ids": [transactional_id]})["transaction_states"][0]

    with WireClient(b.port) as c:
        assert init_producer_id(c, "idle")[0] == NONE
        _, pid, _ = init_producer_id(c, "open-at-crash", timeout_ms=1500)
        txn = ("open-at-crash", pid, 0)
        assert add_partitions(c, txn, "restart-txn", [0]) == [NONE]
        assert produce(c, txn, "restart-txn", 0, 0) == NONE
    b.kill()
    b.start()
    with WireClient(b.port) as c:
        assert describe(c, "open-at-crash")["transaction_state"] in ("Ongoing", "PrepareAbort", "CompleteAbort")
        deadline = time.monotonic() + 15
        while list_offset(c, "restart-txn", 0, READ_COMMITTED) != 2:
            assert time.monotonic() < deadline, "the transaction open at the crash was never aborted"
            time.sleep(0.05)
        wait_for(lambda: describe(c, "open-at-crash")["transaction_state"] != "PrepareAbort", "CompleteAbort")
        state = describe(c, "open-at-crash")
        assert (state["transaction_state"], state["producer_epoch"]) == ("CompleteAbort", 1)
        while describe(c, "idle")["error_code"] != TRANSACTIONAL_ID_NOT_FOUND:
            assert time.monotonic() < deadline, "the idle transactional id never expired"
            time.sleep(0.1)
    b.restart()
    with WireClient(b.port) as c:
        assert describe(c, "idle")["error_code"] == TRANSACTIONAL_ID_NOT_FOUND, "its tombstone is replayed"
        assert init_producer_id(c, "idle")[0] == NONE, "and the id can start over"


TXN_APIS = ["InitProducerId", "AddPartitionsToTxn", "AddOffsetsToTxn", "EndTxn", "WriteTxnMarkers",
            "TxnOffsetCommit", "DescribeTransactions", "ListTransactions"]


def test_every_version_of_odd_requests_is_answered(broker):
    """Random strings, extreme numbers, nulls and empty arrays in every advertised version:
    each request gets a response, and transactions still work afterwards."""
    send_odd_requests(broker.port, TXN_APIS)
    assert broker.alive()
    create_topic(broker.bootstrap, "after-the-noise", partitions=1)
    p = txn_producer(broker.bootstrap, "after-the-noise")
    p.begin_transaction()
    p.produce("after-the-noise", value=b"still works", partition=0)
    p.commit_transaction(DEADLINE_S)
    tp = ("after-the-noise", 0)
    assert values(read(broker.bootstrap, [tp], "read_committed", until={tp: 2})[tp]) == [b"still works"]
