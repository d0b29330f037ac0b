"""storage/clock.py: the FakeClock the unit tier drives every timer with, and the real clock it stands in for."""

from __future__ import annotations

import asyncio

from storage import clock


def test_fake_time_moves_only_when_advanced(fake_clock):
    start, wall = clock.monotonic(), clock.wall_ms()
    assert clock.monotonic() == start
    fake_clock.advance(2.5)
    assert clock.monotonic() == start + 2.5
    assert clock.wall_ms() == wall + 2500
    assert clock.monotonic_ms() == int((start + 2.5) * 1000)


def test_timers_fire_at_their_deadline_in_deadline_order(fake_clock):
    fired = []
    clock.call_later(3, lambda: fired.append(("c", clock.monotonic())))
    clock.call_later(1, lambda: fired.append(("a", clock.monotonic())))
    clock.call_later(2, lambda: fired.append(("b", clock.monotonic())))
    start = clock.monotonic() - 0
    fake_clock.advance(2.5)
    assert fired == [("a", start + 1), ("b", start + 2)]
    fake_clock.advance(0.5)
    assert [name for name, _ in fired] == ["a", "b", "c"]


def test_timers_due_together_fire_in_the_order_they_were_set(fake_clock):
    fired = []
    for name in "xyz":
        clock.call_later(1, fired.append, name)
    fake_clock.advance(1)
    assert fired == ["x", "y", "z"]


def test_a_cancelled_timer_never_fires(fake_clock):
    fired = []
    timer = clock.call_later(1, fired.append, "no")
    timer.cancel()
    assert timer.cancelled() and fake_clock.pending() == 0
    fake_clock.advance(10)
    assert fired == []


def test_a_timer_set_by_a_firing_timer_fires_in_the_same_advance_if_due(fake_clock):
    fired = []
    clock.call_later(1, lambda: clock.call_later(1, fired.append, clock.monotonic()))
    start = clock.monotonic()
    fake_clock.advance(5)
    assert fired == [start + 1]


def test_negative_delays_fire_at_the_next_advance(fake_clock):
    fired = []
    clock.call_later(-5, fired.append, "now")
    assert fired == []
    fake_clock.advance(0)
    assert fired == ["now"]


def test_sleep_returns_only_once_time_passes(fake_clock):
    async def main():
        woke = []

        async def sleeper():
            await clock.sleep(10)
            woke.append(clock.monotonic())

        task = asyncio.ensure_future(sleeper())
        await fake_clock.run_for(9.9)
        assert woke == [] and not task.done()
        await fake_clock.run_for(0.1)
        await task
        return woke

    start = clock.monotonic()
    assert asyncio.run(main()) == [start + 10]


def test_run_for_lets_a_sleeping_loop_take_each_turn(fake_clock):
    async def main():
        ticks = []

        async def ticker():
            while True:
                await clock.sleep(1)
                ticks.append(round(clock.monotonic() - start))

        start = clock.monotonic()
        task = asyncio.ensure_future(ticker())
        await fake_clock.run_for(5)
        task.cancel()
        return ticks

    assert asyncio.run(main()) == [1, 2, 3, 4, 5]


def test_a_cancelled_sleep_leaves_no_timer(fake_clock):
    async def main():
        task = asyncio.ensure_future(clock.sleep(30))
        await asyncio.sleep(0)
        assert fake_clock.pending() == 1
        task.cancel()
        await asyncio.sleep(0)
        assert fake_clock.pending() == 0

    asyncio.run(main())


def test_use_puts_the_previous_clock_back():
    fake = clock.FakeClock(wall_ms=42_000)
    previous = clock.use(fake)
    try:
        assert clock.wall_ms() == 42_000
    finally:
        assert clock.use(previous) is fake
    assert clock.wall_ms() > 1_600_000_000_000  # the system clock again


def test_the_system_clock_runs_real_loop_timers():
    async def main():
        fired = asyncio.Event()
        before = clock.monotonic()
        clock.call_later(0.01, fired.set)
        await asyncio.wait_for(fired.wait(), 5)
        await clock.sleep(0.01)
        return clock.monotonic() - before

    assert asyncio.run(main()) >= 0.02
