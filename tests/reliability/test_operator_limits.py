"""Issue 20: the limits an operator expects, with Kafka's names, each shown biting while a bystander
(tests/helpers/bystander.py, on 127.0.0.1) keeps being served. The abusive client connects from
127.0.0.2 (loopback too) so per-address limits tell the two apart."""

from __future__ import annotations

import socket
import time

import pytest

from helpers import wire
from helpers.wire import alter_quotas, describe_quotas
from helpers.bystander import Bystander

ATTACKER = "127.0.0.2"


def connect_from(port: int, source: str = ATTACKER) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=10, source_address=(source, 0))
    s.settimeout(10)
    return s


def served(s: socket.socket) -> bool:
    """Does the broker answer an ApiVersions on this connection (False: it hung up)?"""
    try:
        wire.api_versions_roundtrip(s, 7)
        return True
    except (ConnectionError, OSError):
        return False


@pytest.mark.timeout(120)
def test_max_connections_per_ip_and_its_overrides(start_broker):
    b = start_broker({"max.connections.per.ip": 4, "max.connections.per.ip.overrides": f"{ATTACKER}:2"})
    held = []
    try:
        with Bystander(b.port, "bystander") as bystander:
            held = [connect_from(b.port) for _ in range(4)]
            assert [served(s) for s in held] == [True, True, False, False], "the override allows 2 from 127.0.0.2"
            # 127.0.0.1 has the default 4: the bystander's one and three more
            local = [connect_from(b.port, "127.0.0.1") for _ in range(4)]
            held += local
            assert [served(s) for s in local] == [True, True, True, False]
            held[0].close()  # a freed place is taken again
            time.sleep(0.5)
            assert served(connect_from(b.port))
        bystander.check()
    finally:
        for s in held:
            s.close()
    assert "refused 1 connection(s)" in b.log_text() and "max.connections.per.ip is 2" in b.log_text()


def answered_within(s: socket.socket, seconds: float) -> bool:
    """Is an ApiVersions sent on ``s`` answered within ``seconds`` (False: no answer yet, the connection open)?"""
    s.sendall(wire.api_versions_v0(1))
    s.settimeout(seconds)
    try:
        wire.recv_frame(s)
        return True
    except TimeoutError:
        return False


@pytest.mark.timeout(120)
def test_max_connections_makes_new_connections_wait(start_broker):
    """At max.connections (all addresses together) the broker stops accepting, as Kafka's acceptor does: a
    new connection waits in the listen backlog, neither answered nor closed, and is served once another
    closes. A stock client connecting meanwhile gets its own timeout, and succeeds after."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    b = start_broker({"max.connections": 6})
    held = []
    try:
        with Bystander(b.port, "bystander") as bystander:  # one connection of the six
            held = [connect_from(b.port) for _ in range(5)]
            assert all(served(s) for s in held)
            waiting = connect_from(b.port)  # the kernel completes the handshake: the client sees it connected
            held.append(waiting)
            assert not answered_within(waiting, 1.5), "a connection past max.connections was served"
            admin = AdminClient({"bootstrap.servers": b.bootstrap, "socket.connection.setup.timeout.ms": 1000})
            with pytest.raises(KafkaException):
                admin.list_topics(timeout=2)
            held[0].close()  # a place frees: the longest waiting connection is accepted and answered
            waiting.settimeout(10)
            wire.recv_frame(waiting)
            assert served(waiting)
            held[1].close()
            assert "bystander" in admin.list_topics(timeout=10).topics, "the stock client connects once there is room"
        bystander.check()
    finally:
        for s in held:
            s.close()
    assert "6 connections open, the limit is 6: new connections wait to be accepted" in b.log_text()


@pytest.mark.timeout(60)
def test_max_connections_spares_the_inter_broker_listener(start_broker):
    """Kafka's protected listener: with clients holding every place, a connection to the inter-broker
    listener is still accepted and served, and the least recently active client connection is closed."""
    from conftest import free_port

    internal = free_port()
    b = start_broker({"listeners": f"CLIENT://127.0.0.1:{{port}},INTERNAL://127.0.0.1:{internal}",
                      "listener.security.protocol.map": "CLIENT:PLAINTEXT,INTERNAL:PLAINTEXT",
                      "inter.broker.listener.name": "INTERNAL", "max.connections": 2})
    with connect_from(b.port) as idle, connect_from(b.port) as active:
        assert served(idle) and served(active)
        time.sleep(0.2)
        assert served(active)  # now the idle one is the least recently active
        with connect_from(internal) as replication:
            assert served(replication)
            closed, _ = wire.wait_closed(idle, timeout=10)
            assert closed, "no client connection made room"
            assert served(active)
    assert "closed to make room for an inter-broker connection" in b.log_text()


@pytest.mark.timeout(120)
def test_max_connection_creation_rate_makes_new_connections_wait(start_broker):
    """KIP-612: 15 connections at once under a rate of 5 a second are all served, the last after ~2 s."""
    b = start_broker({"max.connection.creation.rate": 5})
    started = time.monotonic()
    conns = [connect_from(b.port) for _ in range(15)]
    try:
        assert all(served(s) for s in conns)
        took = time.monotonic() - started
    finally:
        for s in conns:
            s.close()
    assert took >= 1.5, f"15 connections at 5 a second were all served within {took:.2f}s"


@pytest.mark.timeout(60)
def test_idle_connections_are_closed_after_connections_max_idle_ms(start_broker):
    b = start_broker({"connections.max.idle.ms": 1000})
    with connect_from(b.port) as idle, connect_from(b.port) as active:
        for _i in range(15):  # 3 s of a request every 200 ms
            assert served(active)
            time.sleep(0.2)
        closed, _ = wire.wait_closed(idle, timeout=5)
        assert closed, "an idle connection outlived connections.max.idle.ms"
        assert served(active)
    assert "idle for more than connections.max.idle.ms (1000 ms)" in b.log_text()


GROUP_MAX_SIZE_REACHED = 81
MEMBER_ID_REQUIRED = 79


def join_request(member_id: str = "") -> dict:
    return {"group_id": "capped", "session_timeout_ms": 10000, "rebalance_timeout_ms": 10000,
            "member_id": member_id, "group_instance_id": None, "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": b""}], "reason": None}


@pytest.mark.timeout(60)
def test_group_max_size(start_broker):
    """A group of group.max.size members (or members told to come back with their id) refuses another
    new member with GROUP_MAX_SIZE_REACHED, at once."""
    b = start_broker({"group.max.size": 2})
    with wire.WireClient(b.port) as c:
        answers = [c.request("JoinGroup", 5, join_request()) for _ in range(3)]
        assert [a["error_code"] for a in answers] == [MEMBER_ID_REQUIRED, MEMBER_ID_REQUIRED, GROUP_MAX_SIZE_REACHED]
        assert answers[2]["member_id"] == ""


# --- client quotas (AlterClientQuotas / DescribeClientQuotas, throttling) ------------------------------

INVALID_REQUEST = 42
THROTTLING_QUOTA_EXCEEDED = 89


class QuotaClient:
    """Requests under a chosen client.id, timed: the quota is the client id's."""

    def __init__(self, port: int, client_id: str):
        self.sock = wire.connect(port, timeout=60)
        self.client_id, self.correlation_id = client_id, 0

    def request(self, api: str, version: int, body: dict) -> tuple[dict, float]:
        from protocol.frames import decode_response, encode_request

        self.correlation_id += 1
        started = time.monotonic()
        self.sock.sendall(encode_request(api, version, self.correlation_id, self.client_id, body))
        _, response = decode_response(api, version, wire.recv_frame(self.sock))
        return response, time.monotonic() - started


@pytest.mark.timeout(180)
def test_client_quotas_are_kept_described_and_throttle(start_broker):
    from helpers.bystander import produce_body
    from protocol.records import build_batch

    b = start_broker({"quota.window.num": 2})  # rates over 2 s: a test-sized burst is over a quota at once
    with wire.WireClient(b.port) as c:
        assert alter_quotas(c, {"client-id": "slow-producer"}, {"producer_byte_rate": 100_000.0}) == [0]
        assert alter_quotas(c, {"client-id": "slow-reader"}, {"consumer_byte_rate": 100_000.0}) == [0]
        assert alter_quotas(c, {"client-id": "creator"}, {"controller_mutation_rate": 1.0}) == [0]
        assert alter_quotas(c, {"user": None}, {"request_percentage": 200.0}) == [0]  # the default user
        assert alter_quotas(c, {"ip": "10.0.0.1"}, {"producer_byte_rate": 1.0}) == [INVALID_REQUEST]
        assert alter_quotas(c, {"client-id": "x"}, {"no_such_quota": 1.0}) == [INVALID_REQUEST]
        assert alter_quotas(c, {"client-id": "x"}, {"producer_byte_rate": 5.0}, validate_only=True) == [0]
    b.stop()
    b.start()  # kept in client-quotas.json
    with wire.WireClient(b.port) as c:
        assert describe_quotas(c, [("client-id", 0, "slow-producer")]) == {
            (("client-id", "slow-producer"),): {"producer_byte_rate": 100_000.0}}
        assert describe_quotas(c, [("user", 1, None)]) == {(("user", None),): {"request_percentage": 200.0}}
        assert len(describe_quotas(c, [("client-id", 2, None)], strict=True)) == 3, "x was only validated"

    with Bystander(b.port, "bystander") as bystander:
        # producer_byte_rate: 100 KB/s; 600 KB at once is far over it
        producer = QuotaClient(b.port, "slow-producer")
        throttles = []
        for _ in range(3):
            r, _ = producer.request("Produce", 9, produce_body("bystander", build_batch([(None, bytes(200_000))])))
            assert r["responses"][0]["partition_responses"][0]["error_code"] == 0
            throttles.append(r["throttle_time_ms"])
        assert throttles[-1] > 500, throttles
        # the connection is muted for that long (KIP-219): the next answer waits
        _, took = producer.request("ApiVersions", 0, {})
        assert took >= throttles[-1] / 1000 * 0.8, (took, throttles)

        # consumer_byte_rate
        reader = QuotaClient(b.port, "slow-reader")
        fetch = {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": 0,
                 "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
                 "topics": [{"topic": "bystander", "topic_id": __import__("uuid").UUID(int=0), "partitions": [
                     {"partition": 0, "current_leader_epoch": -1, "fetch_offset": 0, "log_start_offset": -1,
                      "partition_max_bytes": 1 << 20}]}]}
        r, _ = reader.request("Fetch", 11, fetch)
        assert sum(len(p["records"] or b"") for p in r["responses"][0]["partitions"]) > 600_000
        assert r["throttle_time_ms"] > 0

        # controller_mutation_rate (KIP-599): CreateTopics v7 refuses topics while the client is over it
        creator = QuotaClient(b.port, "creator")
        r, _ = creator.request("CreateTopics", 7, {"timeout_ms": 10000, "validate_only": False, "topics": [
            {"name": f"mutated-{i}", "num_partitions": 20, "replication_factor": 1, "assignments": [],
             "configs": []} for i in range(3)]})
        assert [t["error_code"] for t in r["topics"]] == [0, THROTTLING_QUOTA_EXCEEDED, THROTTLING_QUOTA_EXCEEDED]
        assert r["throttle_time_ms"] > 0

        # request_percentage: the (user, client-id) entity is the most specific, ahead of the default user's 200 %
        with wire.WireClient(b.port) as c:
            assert alter_quotas(c, {"user": "ANONYMOUS", "client-id": "busy"}, {"request_percentage": 0.01}) == [0]
        busy = QuotaClient(b.port, "busy")
        metadata = {"topics": None, "allow_auto_topic_creation": False, "include_cluster_authorized_operations": False,
                    "include_topic_authorized_operations": False}
        throttles = [busy.request("Metadata", 9, metadata)[0]["throttle_time_ms"] for _ in range(3)]
        # (the first answer's handling alone is over 0.01 %; the same answer again is kept encoded and costs
        # next to nothing, so the later ones need not be)
        assert throttles[0] > 0, throttles
    bystander.check()


@pytest.mark.timeout(60)
def test_connection_creation_rate_quota_of_an_address(start_broker):
    """KIP-612's per-address quota (an ip entity's connection_creation_rate): past it, new connections from
    that address are closed; other addresses connect as before."""
    b = start_broker({"quota.window.num": 2})
    with wire.WireClient(b.port) as c:
        assert alter_quotas(c, {"ip": ATTACKER}, {"connection_creation_rate": 2.0}) == [0]
    conns = [connect_from(b.port) for _ in range(8)]
    try:
        answered = [served(s) for s in conns]
        assert answered[:2] == [True, True] and not all(answered), answered
        with connect_from(b.port, "127.0.0.1") as local:
            assert served(local)
    finally:
        for s in conns:
            s.close()
    assert f"{ATTACKER} is over its connection_creation_rate quota" in b.log_text()


@pytest.mark.timeout(300)
def test_java_admin_sets_client_quotas_and_its_producer_is_throttled(start_broker, java):
    """Admin.alterClientQuotas / describeClientQuotas (Java kafka-clients), and a KafkaProducer whose
    client.id has a producer_byte_rate sees throttle_time_ms (its produce-throttle-time-max metric)."""
    from helpers.java_clients import every, only

    b = start_broker({"quota.window.num": 2})
    with wire.WireClient(b.port) as c:
        c.request("CreateTopics", 5, {"topics": [{"name": "java-quotas", "num_partitions": 1, "replication_factor": 1,
                                                   "assignments": [], "configs": []}],
                                      "timeout_ms": 10000, "validate_only": False})
    lines = java.run(b.bootstrap, "quotas", "java-quotas")
    described = {tuple(sorted(line["entity"].items())): line["values"] for line in every(lines, "quota")}
    assert described == {(("client-id", "java-slow"),): {"producer_byte_rate": 20000.0},
                         (("user", None),): {"request_percentage": 500.0}}
    assert only(lines, "throttle")["produceThrottleTimeMaxMs"] > 0
    b.restart()
    with wire.WireClient(b.port) as c:
        assert describe_quotas(c, [("client-id", 0, "java-slow")]) == {
            (("client-id", "java-slow"),): {"producer_byte_rate": 20000.0}}


@pytest.mark.timeout(120)
def test_producer_ids_rate_refuses_a_flood_of_new_producer_ids(start_broker):
    """KIP-936's producer_ids_rate (a user quota): a client inventing a producer id per request gets
    THROTTLING_QUOTA_EXCEEDED and a throttle time past the rate, so the partition's producer state stops
    growing; an idempotent producer of the same user that keeps writing with its id is not refused."""
    from confluent_kafka import Producer

    from helpers.bystander import produce_body
    from protocol.frames import decode_response, encode_request
    from protocol.records import build_batch

    b = start_broker({"quota.window.num": 2})  # rates over 2 s
    with wire.WireClient(b.port) as c:
        assert alter_quotas(c, {"user": None}, {"producer_ids_rate": 10.0}) == [0]
        assert alter_quotas(c, {"client-id": "x"}, {"producer_ids_rate": 10.0}) == [INVALID_REQUEST], "users only"
        assert describe_quotas(c, [("user", 1, None)]) == {(("user", None),): {"producer_ids_rate": 10.0}}
    with Bystander(b.port, "bystander") as bystander:
        steady = Producer({"bootstrap.servers": b.bootstrap, "enable.idempotence": True, "linger.ms": 0})
        failures = []

        def delivered(err, msg):
            if err is not None:
                failures.append(err)

        steady.produce("bystander", b"steady", on_delivery=delivered)
        assert steady.flush(30) == 0
        codes, throttles = [], []
        for pid in range(1000, 1200):  # a connection and a new producer id per request
            if pid % 10 == 0:  # the steady producer writes with its id every ~10 requests
                steady.produce("bystander", b"steady", on_delivery=delivered)
                steady.poll(0)
            with wire.connect(b.port) as s:
                s.sendall(encode_request("Produce", 9, 1, "inventor", produce_body(
                    "bystander", build_batch([(None, b"x")], producer_id=pid, producer_epoch=0, base_sequence=0))))
                _, r = decode_response("Produce", 9, wire.recv_frame(s))
            codes.append(r["responses"][0]["partition_responses"][0]["error_code"])
            throttles.append(r["throttle_time_ms"])
        assert steady.flush(30) == 0
        with wire.WireClient(b.port) as c:
            r = c.request("DescribeProducers", 0, {"topics": [{"name": "bystander", "partition_indexes": [0]}]})
            remembered = len(r["topics"][0]["partitions"][0]["active_producers"])
    bystander.check()
    admitted, refused = codes.count(0), codes.count(THROTTLING_QUOTA_EXCEEDED)
    print(f"{admitted} producer ids admitted, {refused} refused, longest throttle {max(throttles)} ms; "
          f"{remembered} producers remembered; bystander worst {bystander.worst:.3f}s")
    assert admitted + refused == len(codes), set(codes)
    assert refused > 100 and admitted < 100, (admitted, refused)
    assert max(throttles) > 0 and all(t == 0 for c, t in zip(codes, throttles, strict=False) if c == 0)
    assert not failures, failures[:3]
    assert remembered == admitted + 1, (remembered, admitted)  # the steady producer and the admitted ones
