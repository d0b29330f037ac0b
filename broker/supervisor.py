"""Supervised background work: every long-lived task of the broker runs under its one Supervisor.

A task is a name (Kafka's thread names where it has one: ``isr-expiration``,
``ReplicaFetcherThread-0-2``) and a factory of the coroutine to run. A
coroutine that raises what its loop did not expect does not end the work for
the life of the process: its traceback is logged once, its restarts are
counted (``moldau_background_task_restarts_total{task=...}`` on the metrics
port), and after a backoff -- 0.1 s, doubling up to 10 s, and 0.1 s again once
a run lasted a minute -- the factory makes a fresh coroutine (a replica
fetcher makes a new fetcher: a dead one is never reused). A coroutine that
returns has done its work; cancelling a task (``stop``, the shutdown) ends it.

One-shot tasks (an ISR proposal, an auto-create, a request's own work) are
not restarted, but are held here too (``spawn``) until they end, their
unexpected errors logged, so that none is a bare task nobody holds.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from typing import Awaitable, Callable

from prometheus_client.core import CounterMetricFamily

from storage import clock

from . import faults

log = logging.getLogger("moldau.supervisor")

INITIAL_BACKOFF_S = 0.1
MAX_BACKOFF_S = 10.0
HEALTHY_S = 60.0  # a run this long resets the backoff
FAULT_POLL_S = 0.1  # how often the task-failure fault's file is looked at, when the fault is on

Factory = Callable[[], Awaitable[None]]


class Supervisor:
    def __init__(self, failer: faults.TaskFailer | None = None) -> None:
        self.tasks: dict[str, asyncio.Task] = {}
        self.restarts: Counter = Counter()  # task name -> restarts since the broker started
        self._spawned: set[asyncio.Task] = set()
        self._running: set[asyncio.Task] = set()  # tasks in a run of their coroutine (not waiting to restart)
        self._failing: set[str] = set()  # tasks cancelled by the fault injection: failures, not stops
        self._to_fail: set[str] = set()  # named by the fault injection, not running yet: they fail as they start
        self._failer = failer or faults.TaskFailer(None)

    def start(self, name: str, factory: Factory) -> asyncio.Task:
        """Run ``factory()`` under supervision as ``name``; a task of that name still running is stopped
        first (a partition elected again, a fetcher's leader back)."""
        self.stop(name)
        task = asyncio.get_running_loop().create_task(self._supervise(name, factory), name=name)
        self.tasks[name] = task
        task.add_done_callback(lambda done: self._ended(name, done))
        if self._failer.path is not None and "task-failure-fault" not in self.tasks:
            self.start("task-failure-fault", self._inject_failures)
        return task

    def every(self, name: str, interval_s: Callable[[], float], action: Callable[[], None]) -> asyncio.Task:
        """Run ``action()`` every ``interval_s()`` seconds (read before each wait, so a changed setting
        takes effect), as Kafka's scheduler runs its periodic tasks."""
        async def periodically() -> None:
            while True:
                await clock.sleep(interval_s())
                action()

        return self.start(name, periodically)

    def running(self, name: str) -> bool:
        return name in self.tasks

    def stop(self, name: str) -> None:
        task = self.tasks.pop(name, None)
        if task is not None:
            self._failing.discard(name)
            task.cancel()

    def stop_all(self) -> None:
        """Cancel every task, supervised or spawned; the shutdown (shutdown.run) bounds how long they take."""
        for name in list(self.tasks):
            self.stop(name)
        for task in self._spawned:
            task.cancel()

    def spawn(self, coro: Awaitable) -> asyncio.Task:
        """A one-shot task, held until it ends; an error it raises is logged with its traceback."""
        task = asyncio.get_running_loop().create_task(coro)
        self._spawned.add(task)
        task.add_done_callback(self._spawn_ended)
        return task

    def _spawn_ended(self, task: asyncio.Task) -> None:
        self._spawned.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("task %s failed", task.get_coro().__qualname__, exc_info=task.exception())

    def _ended(self, name: str, task: asyncio.Task) -> None:
        if self.tasks.get(name) is task:
            del self.tasks[name]

    async def _supervise(self, name: str, factory: Factory) -> None:
        this = asyncio.current_task()
        backoff = INITIAL_BACKOFF_S
        while True:
            started = clock.monotonic()
            self._running.add(this)
            try:
                if name in self._to_fail:
                    self._to_fail.discard(name)
                    raise faults.InjectedFailure(f"fault injection ({faults.FAIL_TASKS_FILE_ENV}): {name} fails as it "
                                                 "starts")
                await factory()
                return
            except asyncio.CancelledError as exc:
                if name not in self._failing:
                    raise
                self._failing.discard(name)
                this.uncancel()
                failure: BaseException = exc
            except Exception as exc:  # noqa: BLE001 -- the supervisor's purpose: log, count, restart
                failure = exc
            finally:
                self._running.discard(this)
            if clock.monotonic() - started >= HEALTHY_S:
                backoff = INITIAL_BACKOFF_S
            self.restarts[name] += 1
            injected = isinstance(failure, (asyncio.CancelledError, faults.InjectedFailure))
            log.error("background task %s failed%s; restarting it in %.1fs (restart %d)", name,
                      f" (fault injection: {faults.FAIL_TASKS_FILE_ENV})" if injected else "", backoff,
                      self.restarts[name], exc_info=failure)
            await clock.sleep(backoff)
            backoff = min(backoff * 2, MAX_BACKOFF_S)

    async def _inject_failures(self) -> None:
        """Test-only (faults.TaskFailer): a running task the fault's file names is cancelled where it waits, and
        its supervision takes that as the failure of its run; one not running fails as it starts."""
        while True:
            await clock.sleep(FAULT_POLL_S)
            for name in self._failer.take():
                if self.tasks.get(name) in self._running:
                    log.warning("fault injection (%s): failing background task %s", faults.FAIL_TASKS_FILE_ENV, name)
                    self._failing.add(name)
                    self.tasks[name].cancel()
                else:
                    self._to_fail.add(name)

    # ---- metrics (a prometheus-client collector, registered by BrokerMetrics) ----------------

    def collect(self):
        restarts = CounterMetricFamily("moldau_background_task_restarts",
                                       "Restarts of a background task after it failed", labels=["task"])
        for name, n in sorted(self.restarts.items()):
            restarts.add_metric([name], n)
        yield restarts


async def in_steps(steps) -> None:
    """Drive one of LogManager's *_steps generators, serving other connections between its steps."""
    for _ in steps:
        await asyncio.sleep(0)
