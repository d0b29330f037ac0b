"""The one clock every timer in broker/ and storage/ reads: monotonic time, wall time, sleeps and timers.

Code calls the module's functions (``clock.monotonic()``, ``clock.wall_ms()``, ``await clock.sleep(s)``,
``clock.call_later(s, callback)``), never ``time``/``loop.time``/``asyncio.sleep`` for a deadline, so a
test can swap in a FakeClock with ``clock.use(FakeClock())`` and move time by hand: its timers and sleeps
fire when the test advances it past their deadline, in deadline order, and never otherwise.
``asyncio.sleep(0)`` (a yield to the loop, not a wait) stays as it is.

This module imports only the standard library, so storage/ may use it without depending on the broker.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from typing import Any, Callable


class SystemClock:
    """The real clock: time.monotonic, time.time_ns and the running loop's timers."""

    def monotonic(self) -> float:
        return time.monotonic()

    def wall_ms(self) -> int:
        return time.time_ns() // 1_000_000

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    def call_later(self, seconds: float, callback: Callable[..., Any], *args: Any) -> asyncio.TimerHandle:
        return asyncio.get_running_loop().call_later(seconds, callback, *args)


class FakeTimer:
    """A FakeClock timer; ``cancel()`` as on an asyncio.TimerHandle."""

    __slots__ = ("when", "_seq", "_callback", "_args", "_cancelled")

    def __init__(self, when: float, seq: int, callback: Callable[..., Any], args: tuple) -> None:
        self.when, self._seq, self._callback, self._args, self._cancelled = when, seq, callback, args, False

    def __lt__(self, other: FakeTimer) -> bool:  # the heap's order: deadline, then the order they were set
        return (self.when, self._seq) < (other.when, other._seq)

    def cancel(self) -> None:
        self._cancelled = True

    def cancelled(self) -> bool:
        return self._cancelled


class FakeClock:
    """A clock for tests whose time moves only by ``advance`` (callbacks) or ``run_for`` (also sleepers).
    Its wall time starts at the real one unless given: files' mtimes (a segment's age without
    timestamps) are real."""

    def __init__(self, wall_ms: int | None = None, monotonic: float = 1000.0) -> None:
        if wall_ms is None:
            wall_ms = time.time_ns() // 1_000_000
        self._now = monotonic
        self._wall_offset_ms = wall_ms - int(monotonic * 1000)
        self._timers: list[FakeTimer] = []
        self._seq = itertools.count()

    def monotonic(self) -> float:
        return self._now

    def wall_ms(self) -> int:
        return self._wall_offset_ms + round(self._now * 1000)

    def call_later(self, seconds: float, callback: Callable[..., Any], *args: Any) -> FakeTimer:
        timer = FakeTimer(self._now + max(seconds, 0.0), next(self._seq), callback, args)
        heapq.heappush(self._timers, timer)
        return timer

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        woken = asyncio.get_running_loop().create_future()
        timer = self.call_later(seconds, lambda: woken.done() or woken.set_result(None))
        try:
            await woken
        finally:
            timer.cancel()

    def pending(self) -> int:
        """How many timers (and sleeps) wait."""
        return sum(not t.cancelled() for t in self._timers)

    def _pop_due(self, until: float) -> FakeTimer | None:
        while self._timers and self._timers[0].when <= until:
            timer = heapq.heappop(self._timers)
            if not timer.cancelled():
                return timer
        return None

    def advance(self, seconds: float) -> None:
        """Move time on by ``seconds``, running every timer that falls due on the way, at its deadline."""
        until = self._now + seconds
        while (timer := self._pop_due(until)) is not None:
            self._now = max(self._now, timer.when)
            timer._callback(*timer._args)
        self._now = until

    async def run_for(self, seconds: float) -> None:
        """``advance``, letting the loop run after each timer, so a woken sleeper can set its next one."""
        until = self._now + seconds
        await _settle()
        while (timer := self._pop_due(until)) is not None:
            self._now = max(self._now, timer.when)
            timer._callback(*timer._args)
            await _settle()
        self._now = until


async def _settle() -> None:
    for _ in range(5):  # a woken future's task runs one loop pass later; a few passes let chains finish
        await asyncio.sleep(0)


_current: SystemClock | FakeClock = SystemClock()


def use(new: SystemClock | FakeClock) -> SystemClock | FakeClock:
    """Make ``new`` the clock everything reads; returns the one it replaces (tests put it back)."""
    global _current
    previous, _current = _current, new
    return previous


def monotonic() -> float:
    return _current.monotonic()


def wall_ms() -> int:
    """Milliseconds since the epoch: timestamps, retention, expiry times."""
    return _current.wall_ms()


def monotonic_ms() -> int:
    return int(_current.monotonic() * 1000)


async def sleep(seconds: float) -> None:
    await _current.sleep(seconds)


def call_later(seconds: float, callback: Callable[..., Any], *args: Any) -> asyncio.TimerHandle | FakeTimer:
    return _current.call_later(seconds, callback, *args)
