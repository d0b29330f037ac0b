"""Share groups (KIP-932, Queues for Kafka) with confluent-kafka's ShareConsumer against a real broker.

Several consumers read one partition cooperatively; each record is acquired under a
lock and acknowledged on its own: ACCEPT, RELEASE (redelivered, delivery count + 1),
REJECT (never again); an expired lock releases the record to another consumer; the
delivery count limit archives it; acknowledged records stay done after a kill -9.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter

from confluent_kafka import AcknowledgeType, Producer

from helpers.kafka import create_topic
from helpers.share import (SHARE_BROKER, assignment, describe, heartbeat, listed, new_topic, records, share_consumer,
                           topic_id, warm_up)
from helpers.wire import WireClient, alter_group_configs, describe_group_configs
from operations.test_metrics import scrape

from conftest import free_port


def _poll_until(c, want, timeout: float, explicit_ack=None) -> list:
    """Poll ``c`` until ``want(received)`` holds; the records received (acknowledged by ``explicit_ack``)."""
    got = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not want(got):
        batch = records(c.poll(0.5))
        got += batch
        if explicit_ack is not None and batch:
            for m in batch:
                c.acknowledge(m, explicit_ack(m))
            c.commit_sync()
    return got


def test_consumers_share_one_partition_and_nothing_is_delivered_twice(start_broker):
    b = start_broker(SHARE_BROKER)
    new_topic(b.bootstrap, "work")
    consumers = [share_consumer(b.bootstrap, "workers", "work") for _ in range(3)]
    try:
        p = warm_up(b.bootstrap, "work", consumers)
        got: dict[int, list] = {i: [] for i in range(3)}
        stop = threading.Event()

        def work(i):
            while not stop.is_set():
                got[i] += [m.value() for m in records(consumers[i].poll(0.2)) if m.value() != b"warm-up"]

        threads = [threading.Thread(target=work, args=(i,)) for i in range(3)]
        for t in threads:
            t.start()
        expected = [f"job-{n}".encode() for n in range(90)]
        for value in expected:
            p.produce("work", value)
            p.flush(10)
            time.sleep(0.01)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and sum(len(v) for v in got.values()) < len(expected):
            time.sleep(0.2)
        time.sleep(2.5)  # past a lock's expiry: anything delivered twice would show now
        stop.set()
        for t in threads:
            t.join()
        counts = Counter(v for values in got.values() for v in values)
        assert sorted(counts) == sorted(expected), "every record delivered"
        assert max(counts.values()) == 1, f"delivered twice: {[v for v, n in counts.items() if n > 1]}"
        assert sum(1 for values in got.values() if values) >= 2, "the partition is shared by the consumers"
        with WireClient(b.port) as w:
            listed = w.request("ListGroups", 5, {"states_filter": [], "types_filter": ["share"]})
            assert [(g["group_id"], g["group_type"], g["group_state"]) for g in listed["groups"]] == [
                ("workers", "share", "Stable")]
            described = w.request("ShareGroupDescribe", 1, {"group_ids": ["workers"],
                                                            "include_authorized_operations": False})
            group = described["groups"][0]
            assert group["error_code"] == 0 and len(group["members"]) == 3
            assert all(m["assignment"]["topic_partitions"][0]["partitions"] == [0] for m in group["members"])
    finally:
        for c in consumers:
            c.close()


def test_release_redelivers_with_delivery_count_2_and_reject_never_redelivers(start_broker):
    port = free_port()
    b = start_broker(SHARE_BROKER, {"metrics.port": port})
    new_topic(b.bootstrap, "jobs")
    c = share_consumer(b.bootstrap, "g", "jobs", explicit=True)
    try:
        p = warm_up(b.bootstrap, "jobs", [c], explicit=True)
        for value in (b"release-me", b"reject-me", b"accept-me"):
            p.produce("jobs", value)
        p.flush(10)
        kinds = {b"release-me": AcknowledgeType.RELEASE, b"reject-me": AcknowledgeType.REJECT}
        first = _poll_until(c, lambda got: {b"release-me", b"reject-me", b"accept-me"} <= {m.value() for m in got},
                            30, lambda m: kinds.get(m.value(), AcknowledgeType.ACCEPT))
        assert {m.value(): m.delivery_count() for m in first if m.value() != b"warm-up"} == {
            b"release-me": 1, b"reject-me": 1, b"accept-me": 1}
        again = _poll_until(c, lambda got: False, 5, lambda m: AcknowledgeType.ACCEPT)
        assert [(m.value(), m.delivery_count()) for m in again] == [(b"release-me", 2)]
        metrics = scrape(port)
        labels = (("partition", "0"), ("sharegroup", "g"), ("topic", "jobs"))
        assert metrics[("moldau_share_group_backlog", *labels)] == 0
        assert metrics[("moldau_share_group_records_acquired", *labels)] == 0
        warm_ups = metrics[("moldau_share_group_acknowledgements_total", ("type", "accept"))] - 2
        assert metrics[("moldau_share_group_acquisitions_total", *labels)] == warm_ups + 4  # release-me twice
        assert metrics[("moldau_share_group_acknowledgements_total", ("type", "release"))] == 1
        assert metrics[("moldau_share_group_acknowledgements_total", ("type", "reject"))] == 1
    finally:
        c.close()


def test_an_expired_lock_goes_to_another_consumer_and_the_delivery_limit_archives(start_broker):
    b = start_broker(SHARE_BROKER, {"group.share.delivery.count.limit": 2})
    new_topic(b.bootstrap, "locks")
    holder = share_consumer(b.bootstrap, "g", "locks", explicit=True)
    other = share_consumer(b.bootstrap, "g", "locks", explicit=True)
    try:
        p = warm_up(b.bootstrap, "locks", [holder], explicit=True)
        p.produce("locks", b"slow")
        p.flush(10)
        held = _poll_until(holder, lambda got: any(m.value() == b"slow" for m in got), 30)
        assert [(m.value(), m.delivery_count()) for m in held] == [(b"slow", 1)]
        # the holder never acknowledges: after the 2 s lock the record is the other consumer's
        taken = _poll_until(other, lambda got: any(m.value() == b"slow" for m in got), 30)
        assert [(m.value(), m.delivery_count()) for m in taken if m.value() == b"slow"] == [(b"slow", 2)]
        # its second lock expires too: delivery count 2 is the limit, so it is archived, not redelivered
        third = share_consumer(b.bootstrap, "g", "locks")
        try:
            assert [m.value() for m in _poll_until(third, lambda got: False, 4)] == []
        finally:
            third.close()
    finally:
        holder.close()
        other.close()


def test_acknowledged_records_stay_done_after_kill_9(start_broker):
    b = start_broker(SHARE_BROKER)
    new_topic(b.bootstrap, "durable")
    c = share_consumer(b.bootstrap, "g", "durable", explicit=True)
    values = [f"r{n}".encode() for n in range(20)]
    try:
        p = warm_up(b.bootstrap, "durable", [c], explicit=True)
        for value in values:
            p.produce("durable", value)
        p.flush(10)
        # accept the first ten, release the next five, leave the last five acquired when the broker dies
        plan = {v: AcknowledgeType.ACCEPT for v in values[:10]} | {v: AcknowledgeType.RELEASE for v in values[10:15]}
        got = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not set(values) <= {m.value() for m in got}:
            batch = records(c.poll(0.5))
            got += batch
            acked = [m for m in batch if m.value() in plan or m.value() == b"warm-up"]
            for m in acked:
                c.acknowledge(m, plan.get(m.value(), AcknowledgeType.ACCEPT))
            if acked:
                c.commit_sync()
            if any(m not in acked for m in batch):
                break  # explicit mode polls on only once every record is acknowledged
        done = {m.value() for m in got}
        assert set(values[:10]) <= done
    finally:
        b.kill()
        c.close()
    b.restart()
    with WireClient(b.port) as w:  # the group is back from __consumer_offsets, its member until its session ends
        assert describe(w, "g")["error_code"] == 0
        assert listed(w) == [("g", "Stable")]
    after = share_consumer(b.bootstrap, "g", "durable")
    try:
        redelivered = _poll_until(after, lambda got: len(got) >= 10, 45)
        redelivered += _poll_until(after, lambda got: False, 3)
        assert sorted(m.value() for m in redelivered) == sorted(values[10:]), "only the unacknowledged ones"
    finally:
        after.close()


def _members(described: dict) -> list[tuple]:
    return sorted((m["member_id"], m["member_epoch"], m["subscribed_topic_names"],
                   sorted((t["topic_name"], t["partitions"]) for t in m["assignment"]["topic_partitions"]))
                  for m in described["members"])


def test_a_restarted_coordinator_keeps_the_share_group_and_deletes_it(start_broker):
    """Membership lives in __consumer_offsets: after a kill -9 the group is back with its epochs, members (until
    their sessions run out) and assignment; an empty one is still listed, and DeleteGroups deletes it."""
    b = start_broker({**SHARE_BROKER, "group.share.session.timeout.ms": 5000,
                      "group.share.min.session.timeout.ms": 1000})
    create_topic(b.bootstrap, "moved", 2)
    with WireClient(b.port) as w:
        one = heartbeat(w, "mg", "member-one", 0, ["moved"])
        two = heartbeat(w, "mg", "member-two", 0, ["moved"])
        one = heartbeat(w, "mg", "member-one", one["member_epoch"])
        assert one["error_code"] == two["error_code"] == 0 and one["member_epoch"] == two["member_epoch"]
        before = describe(w, "mg")
        assert len(before["members"]) == 2 and before["group_epoch"] == before["assignment_epoch"] > 0
    b.kill()
    b.restart()
    with WireClient(b.port) as w:
        after = describe(w, "mg")
        assert (after["error_code"], after["group_state"], after["group_epoch"], after["assignment_epoch"]) == (
            0, "Stable", before["group_epoch"], before["assignment_epoch"])
        assert _members(after) == _members(before)
        assert listed(w) == [("mg", "Stable")]
        # member-one goes on at its epoch; member-two, silent, is fenced once its fresh session runs out
        deadline = time.monotonic() + 30
        epoch = one["member_epoch"]
        while len(describe(w, "mg")["members"]) == 2 and time.monotonic() < deadline:
            beat = heartbeat(w, "mg", "member-one", epoch)
            assert beat["error_code"] == 0, beat
            epoch = beat["member_epoch"]
            time.sleep(0.5)
        beat = heartbeat(w, "mg", "member-one", epoch)
        assert beat["member_epoch"] > one["member_epoch"] and [p for _, p in assignment(beat)] == [[0, 1]]
        assert heartbeat(w, "mg", "member-one", -1)["error_code"] == 0
        assert listed(w) == [("mg", "Empty")]
        empty = describe(w, "mg")
    b.kill()
    b.restart()
    with WireClient(b.port) as w:
        again = describe(w, "mg")
        assert (again["group_state"], again["group_epoch"], again["members"]) == ("Empty", empty["group_epoch"], [])
        assert listed(w) == [("mg", "Empty")]
        assert w.request("DeleteGroups", 2, {"groups_names": ["mg"]})["results"][0]["error_code"] == 0
        assert listed(w) == []
    b.restart()
    with WireClient(b.port) as w:
        assert describe(w, "mg")["error_code"] == 69  # GROUP_ID_NOT_FOUND: its tombstones were replayed
        assert listed(w) == []


def test_share_state_is_initialized_when_a_group_subscribes_and_summarized_for_the_admin(start_broker):
    """InitializeShareGroupState (83) and ReadShareGroupStateSummary (87) at the share coordinator: a member
    joining initializes its partitions' state (start -1, state epoch = group epoch) before its heartbeat is
    answered; the summary counts the window's done offsets (v1); an older state epoch is fenced, a newer one
    starts the state anew and fences the leader's writes of the old one, so its next fetch starts there."""
    b = start_broker(SHARE_BROKER)
    new_topic(b.bootstrap, "init")
    p = Producer({"bootstrap.servers": b.bootstrap})
    with WireClient(b.port) as w:
        tid = topic_id(b.port, "init")
        joined = heartbeat(w, "ig", "init-member-000000001", 0, ["init"])
        assert joined["error_code"] == 0

        def summary(version: int, group: str = "ig", topic=tid) -> dict:
            answer = w.request("ReadShareGroupStateSummary", version, {"group_id": group, "topics": [
                {"topic_id": topic, "partitions": [{"partition": 0, "leader_epoch": -1}]}]})
            return answer["results"][0]["partitions"][0]

        def initialize(state_epoch: int, start: int, topic=tid) -> int:
            answer = w.request("InitializeShareGroupState", 0, {"group_id": "ig", "topics": [
                {"topic_id": topic, "partitions": [{"partition": 0, "state_epoch": state_epoch, "start_offset": start}]}]})
            return answer["results"][0]["partitions"][0]["error_code"]

        first = summary(1)
        assert (first["error_code"], first["start_offset"], first["state_epoch"], first["delivery_complete_count"]) == (
            0, -1, joined["member_epoch"], -1)
        for n in range(5):
            p.produce("init", f"i{n}".encode())
        p.flush(10)

        def fetch(epoch: int, acks: list[dict]) -> dict:
            return w.request("ShareFetch", 1, {
                "group_id": "ig", "member_id": "init-member-000000001", "share_session_epoch": epoch,
                "max_wait_ms": 100, "min_bytes": 1, "max_bytes": 1 << 20, "max_records": 10, "batch_size": 10,
                "topics": [{"topic_id": tid, "partitions": [{"partition_index": 0, "acknowledgement_batches": acks}]}],
                "forgotten_topics_data": []})["responses"][0]["partitions"][0]

        # latest: the state starts at the log's end when first fetched (nothing to answer)
        assert w.request("ShareFetch", 1, {
            "group_id": "ig", "member_id": "init-member-000000001", "share_session_epoch": 0, "max_wait_ms": 100,
            "min_bytes": 1, "max_bytes": 1 << 20, "max_records": 10, "batch_size": 10,
            "topics": [{"topic_id": tid, "partitions": [{"partition_index": 0, "acknowledgement_batches": []}]}],
            "forgotten_topics_data": []})["responses"] == []
        for n in range(5, 10):
            p.produce("init", f"i{n}".encode())
        p.flush(10)
        assert fetch(1, [])["acquired_records"] == [{"first_offset": 5, "last_offset": 9, "delivery_count": 1}]
        accepted = fetch(2, [{"first_offset": 6, "last_offset": 7, "acknowledge_types": [1]}])
        assert accepted["acknowledge_error_code"] == 0
        done = summary(1)
        assert (done["start_offset"], done["delivery_complete_count"]) == (5, 2)  # 6 and 7 of the window [5, 9]
        v0 = summary(0)  # (no DeliveryCompleteCount on the wire: the decoder's default)
        assert (v0["start_offset"], v0["delivery_complete_count"]) == (5, 0)
        assert summary(1, group="nobody")["state_epoch"] == -1  # no state: -1s

        assert initialize(done["state_epoch"] - 1, 0) == 124  # FENCED_STATE_EPOCH
        assert initialize(done["state_epoch"], 0, topic=uuid.uuid4()) == 3  # UNKNOWN_TOPIC_OR_PARTITION
        assert initialize(done["state_epoch"] + 1, 9) == 0
        anew = summary(1)
        assert (anew["start_offset"], anew["state_epoch"], anew["delivery_complete_count"]) == (
            9, done["state_epoch"] + 1, 0)
        # the leader's write of the old state epoch is fenced, and what it acquires next comes from the new state
        fenced = fetch(3, [{"first_offset": 5, "last_offset": 5, "acknowledge_types": [1]}])
        assert fenced["acknowledge_error_code"] == 124
        assert fenced["acquired_records"] == [{"first_offset": 9, "last_offset": 9, "delivery_count": 1}]
        described = w.request("DescribeShareGroupOffsets", 1, {"groups": [{"group_id": "ig", "topics": None}]})
        (offset,) = described["groups"][0]["topics"][0]["partitions"]
        assert (offset["start_offset"], offset["lag"]) == (9, 1)  # 9 is acquired, not done


def _set_group_configs(port: int, group: str, configs: dict[str, str]) -> None:
    with WireClient(port) as w:
        assert alter_group_configs(w, group, configs) == (0, None)
        entries = describe_group_configs(w, group)
        assert {n: entries[n] for n in configs} == {n: (v, 8) for n, v in configs.items()}  # GROUP_CONFIG


def test_read_committed_share_group_never_sees_aborted_or_open_transactions(start_broker):
    b = start_broker(SHARE_BROKER)
    new_topic(b.bootstrap, "txns")
    _set_group_configs(b.port, "rc", {"share.isolation.level": "read_committed", "share.auto.offset.reset": "earliest"})
    p = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": "share-txn"})
    p.init_transactions(30)
    for values, commit in (([b"committed-1"], True), ([b"aborted-1", b"aborted-2"], False), ([b"committed-2"], True)):
        p.begin_transaction()
        for v in values:
            p.produce("txns", v)
        p.flush(10)
        (p.commit_transaction if commit else p.abort_transaction)(30)
    p.begin_transaction()
    p.produce("txns", b"open-until-later")
    p.flush(10)
    c = share_consumer(b.bootstrap, "rc", "txns")
    try:
        got = _poll_until(c, lambda got: b"committed-2" in [m.value() for m in got], 30)
        got += _poll_until(c, lambda got: False, 1.5)
        assert [m.value() for m in got] == [b"committed-1", b"committed-2"]
        p.commit_transaction(30)
        later = _poll_until(c, lambda got: len(got) >= 1, 30)
        later += _poll_until(c, lambda got: False, 1)
        assert [m.value() for m in later] == [b"open-until-later"]
    finally:
        c.close()


def test_bad_share_requests_get_error_codes(start_broker):
    b = start_broker(SHARE_BROKER)
    new_topic(b.bootstrap, "bad")
    with WireClient(b.port) as w:
        tid = topic_id(b.port, "bad")
        beat = w.request("ShareGroupHeartbeat", 1, {"group_id": "bg", "member_id": "", "member_epoch": 0,
                                                    "rack_id": None, "subscribed_topic_names": ["bad"]})
        assert beat["error_code"] == 42  # INVALID_REQUEST: a member id is the client's own
        beat = w.request("ShareGroupHeartbeat", 1, {"group_id": "bg", "member_id": "m" * 20, "member_epoch": 3,
                                                    "rack_id": None, "subscribed_topic_names": None})
        assert beat["error_code"] == 25  # UNKNOWN_MEMBER_ID

        def fetch(epoch: int, acks: list[dict]) -> dict:
            return w.request("ShareFetch", 1, {
                "group_id": "bg", "member_id": "m" * 20, "share_session_epoch": epoch, "max_wait_ms": 0,
                "min_bytes": 1, "max_bytes": 1 << 20, "max_records": 10, "batch_size": 10,
                "topics": [{"topic_id": tid, "partitions": [{"partition_index": 0,
                                                                   "acknowledgement_batches": acks}]}],
                "forgotten_topics_data": []})

        huge = [{"first_offset": 0, "last_offset": 2**62, "acknowledge_types": [1]}]
        assert fetch(3, [])["error_code"] == 122  # SHARE_SESSION_NOT_FOUND
        assert fetch(0, huge)["error_code"] == 42  # a new session carries no acknowledgements
        assert fetch(0, [])["error_code"] == 0
        assert fetch(5, [])["error_code"] == 123  # INVALID_SHARE_SESSION_EPOCH: 1 is next
        answer = fetch(1, huge)
        assert answer["error_code"] == 0
        assert answer["responses"][0]["partitions"][0]["acknowledge_error_code"] == 121  # INVALID_RECORD_STATE
        ack = w.request("ShareAcknowledge", 1, {"group_id": "bg", "member_id": "m" * 20, "share_session_epoch": 0,
                                                "topics": []})
        assert ack["error_code"] == 42
        # the group's own heartbeat interval, within group.share.min/max.heartbeat.interval.ms
        assert alter_group_configs(w, "hg", {"share.heartbeat.interval.ms": "50"})[0] == 40  # INVALID_CONFIG
        assert alter_group_configs(w, "hg", {"share.heartbeat.interval.ms": "700"}) == (0, None)
        beat = w.request("ShareGroupHeartbeat", 1, {"group_id": "hg", "member_id": "h" * 20, "member_epoch": 0,
                                                    "rack_id": None, "subscribed_topic_names": ["bad"]})
        assert (beat["error_code"], beat["heartbeat_interval_ms"]) == (0, 700), beat
        assert w.request("ApiVersions", 3, {"client_software_name": "t", "client_software_version": "1"})[
            "error_code"] == 0  # still serving


def test_a_closed_connection_releases_its_records_before_their_locks_expire(start_broker):
    b = start_broker(SHARE_BROKER)
    new_topic(b.bootstrap, "conn")
    _set_group_configs(b.port, "cg", {"share.auto.offset.reset": "earliest", "share.record.lock.duration.ms": "60000"})
    p = Producer({"bootstrap.servers": b.bootstrap})
    p.produce("conn", b"held")
    p.flush(10)
    w = WireClient(b.port)
    tid = topic_id(b.port, "conn")
    # a member (its share partition's state initialized as it joins) fetches the record, then its process dies
    assert heartbeat(w, "cg", "raw-member-0000000001", 0, ["conn"])["error_code"] == 0
    fetched = w.request("ShareFetch", 1, {
        "group_id": "cg", "member_id": "raw-member-0000000001", "share_session_epoch": 0, "max_wait_ms": 5000,
        "min_bytes": 1, "max_bytes": 1 << 20, "max_records": 10, "batch_size": 10,
        "topics": [{"topic_id": tid, "partitions": [{"partition_index": 0, "acknowledgement_batches": []}]}],
        "forgotten_topics_data": []})
    assert fetched["responses"][0]["partitions"][0]["acquired_records"] == [
        {"first_offset": 0, "last_offset": 0, "delivery_count": 1}]
    w.close()  # the process holding the record is gone: its lock (60 s) need not be waited out
    c = share_consumer(b.bootstrap, "cg", "conn")
    try:
        started = time.monotonic()
        got = _poll_until(c, lambda got: len(got) >= 1, 40)
        assert [(m.value(), m.delivery_count()) for m in got] == [(b"held", 2)]
        assert time.monotonic() - started < 40
    finally:
        c.close()


def test_renew_keeps_a_record_past_its_lock_and_record_limit_acquires_at_most_max_records(start_broker):
    b = start_broker(SHARE_BROKER)  # locks of 2 s
    new_topic(b.bootstrap, "renew")
    _set_group_configs(b.port, "rg", {"share.auto.offset.reset": "earliest"})
    p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 50})
    for n in range(3):
        p.produce("renew", f"r{n}".encode())
    p.flush(10)  # one batch of three records
    with WireClient(b.port) as w:
        tid = topic_id(b.port, "renew")
        epoch = 0

        def fetch(acks: list[dict], **overrides) -> dict:
            nonlocal epoch
            body = {"group_id": "rg", "member_id": "renewing-member-0001", "share_session_epoch": epoch,
                    "max_wait_ms": 2000, "min_bytes": 1, "max_bytes": 1 << 20, "max_records": 2, "batch_size": 2,
                    "share_acquire_mode": 1, "is_renew_ack": False,
                    "topics": [{"topic_id": tid, "partitions": [{"partition_index": 0,
                                                                       "acknowledgement_batches": acks}]}],
                    "forgotten_topics_data": []}
            body.update(overrides)
            epoch += 1
            answer = w.request("ShareFetch", 2, body)
            assert answer["error_code"] == 0, answer
            return answer["responses"][0]["partitions"][0] if answer["responses"] else {}

        # record-limit mode: two of the batch's three records, not the whole batch
        assert fetch([])["acquired_records"] == [{"first_offset": 0, "last_offset": 1, "delivery_count": 1}]
        for _ in range(3):  # renewed each second, so held 3 s by 2 s locks
            time.sleep(1)
            renewed = fetch([{"first_offset": 0, "last_offset": 1, "acknowledge_types": [4]}], is_renew_ack=True,
                            max_wait_ms=0, min_bytes=0, max_bytes=0, max_records=0)
            assert renewed["acknowledge_error_code"] == 0 and renewed["acquired_records"] == []
        ack = w.request("ShareAcknowledge", 2, {
            "group_id": "rg", "member_id": "renewing-member-0001", "share_session_epoch": epoch, "is_renew_ack": False,
            "topics": [{"topic_id": tid, "partitions": [{"partition_index": 0, "acknowledgement_batches": [
                {"first_offset": 0, "last_offset": 1, "acknowledge_types": [1]}]}]}]})
        assert ack["error_code"] == 0 and ack["acquisition_lock_timeout_ms"] == 2000
        assert ack["responses"][0]["partitions"][0]["error_code"] == 0  # still its own: the locks were renewed


def test_share_groups_switched_off(start_broker):
    b = start_broker({"group.share.enable": "false"})
    with WireClient(b.port) as w:
        versions = w.request("ApiVersions", 3, {"client_software_name": "t", "client_software_version": "1"})
        assert not {k["api_key"] for k in versions["api_keys"]} & {76, 77, 78, 79, 90, 91, 92}
        assert ("share.version", 0, 0) in [(f["name"], f["min_version_level"], f["max_version_level"])
                                           for f in versions["finalized_features"]]
        beat = w.request("ShareGroupHeartbeat", 1, {"group_id": "off", "member_id": "m" * 20, "member_epoch": 0,
                                                    "rack_id": None, "subscribed_topic_names": ["t"]})
        assert beat["error_code"] == 35  # UNSUPPORTED_VERSION
