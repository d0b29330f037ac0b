"""The unit tier: broker logic in this process, time from a FakeClock, no process started, no socket opened.

Every test here is marked ``unit`` (tests/conftest.py; ``pytest -m unit``, ``make test-unit``). A test that tries to start a
process or open a network connection fails: that belongs in the tiers that start brokers.
"""

from __future__ import annotations

import asyncio
import socket
import subprocess

import pytest

from protocol.records import parse_produce_records
from storage import clock
from storage.config import LogConfig
from storage.log_manager import LogManager


def _refuse(*_args, **_kwargs):
    raise AssertionError("a unit test may not start a process or open a network connection")


@pytest.fixture(autouse=True)
def in_process_only(monkeypatch):
    monkeypatch.setattr(subprocess.Popen, "__init__", _refuse)
    for method in ("connect", "connect_ex", "bind"):
        monkeypatch.setattr(socket.socket, method, _refuse)


@pytest.fixture
def fake_clock():
    """A FakeClock made the clock everything reads, for the test's length."""
    fake = clock.FakeClock()
    previous = clock.use(fake)
    yield fake
    clock.use(previous)


@pytest.fixture
def logs(tmp_path):
    """A LogManager on a fresh data directory, with no topic yet."""
    manager = LogManager(tmp_path / "data", LogConfig())
    manager.load()
    yield manager
    manager.close()


def append(log, *batches: bytes, now_ms: int) -> tuple[int, int]:
    """Append ``batches`` in one produce call, as the broker would."""
    buf = bytearray(b"".join(batches))
    return log.append(buf, parse_produce_records(buf), now_ms)


def run(coro, seconds: float = 10):
    """``coro`` on a fresh event loop; an answer that never comes fails the test (after ``seconds`` of real
    time) instead of hanging it: with a fake clock, a timer nobody advances to never fires."""
    async def bounded():
        return await asyncio.wait_for(coro, seconds)
    return asyncio.run(bounded())
