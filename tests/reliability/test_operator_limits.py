"""Issue 20: the limits an operator expects, with Kafka's names, each shown biting while a bystander
(tests/helpers/bystander.py, on 127.0.0.1) keeps being served. The abusive client connects from
127.0.0.2 (loopback too) so per-address limits tell the two apart."""

from __future__ import annotations

import socket
import time

import pytest

from helpers import wire
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


@pytest.mark.timeout(120)
def test_max_connections_counts_every_address(start_broker):
    b = start_broker({"max.connections": 6})
    held = []
    try:
        with Bystander(b.port, "bystander") as bystander:  # one connection of the six
            held = [connect_from(b.port) for _ in range(7)]
            assert [served(s) for s in held] == [True] * 5 + [False] * 2
            time.sleep(1)  # the bystander goes on being served meanwhile
        bystander.check()
    finally:
        for s in held:
            s.close()


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
        for i in range(15):  # 3 s of a request every 200 ms
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
