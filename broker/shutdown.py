"""Stopping within bounds: a SIGTERM ends the process even when some task does not end when cancelled.

Python 3.11's asyncio.wait_for loses a cancellation that arrives as the call it waits for completes
(it returns the call's result instead), and a library call may ignore cancellation; asyncio.run then
waits forever for such a task at its end. Here each step of the shutdown is bounded, and what is still
running after its bound is logged and left behind, so the logs are still flushed and closed.
"""

from __future__ import annotations

import asyncio
import faulthandler
import logging

log = logging.getLogger("moldau.shutdown")

# how long the tasks still running when the server has stopped get to end once cancelled
DRAIN_S = 5.0
# the last resort, counted from the signal: well past the bounded steps (hand-over 10 s, etcd session 10 s,
# the drain and async generators 10 s), with room for closing the logs on a slow disk
WATCHDOG_S = 120.0


def arm_watchdog(seconds: float = WATCHDOG_S) -> None:
    """For an event loop blocked in a call that never returns, which no bound above can reach: after
    ``seconds`` every thread's stack goes to stderr and the process exits with status 1. Its logs are left
    to the next start's recovery: the blocked thread may be in the middle of writing one."""
    faulthandler.dump_traceback_later(seconds, exit=True)


async def within(seconds: float, awaitable, what: str):
    """``awaitable``'s result if it completes within ``seconds``; else it is cancelled and left behind (not
    waited for, unlike wait_for) and TimeoutError is raised."""
    task = asyncio.ensure_future(awaitable)
    try:
        done, _ = await asyncio.wait({task}, timeout=seconds)
    finally:
        if not task.done():
            task.cancel()
    if not done:
        raise TimeoutError(f"{what} did not complete within {seconds:g}s")
    return task.result()


def run(main, new_loop, drain_s: float = DRAIN_S):
    """Run ``main`` on a new event loop, as asyncio.run does, except that the tasks still running when it
    returns get ``drain_s`` seconds to end once cancelled; those that do not are logged and abandoned."""
    loop = new_loop()
    try:
        return loop.run_until_complete(main)
    finally:
        try:
            _cancel_remaining(loop, drain_s)
            loop.run_until_complete(_bounded(loop.shutdown_asyncgens(), drain_s, "closing async generators"))
            loop.run_until_complete(loop.shutdown_default_executor())  # large requests' codec work: it ends
        finally:
            loop.close()


async def _bounded(awaitable, seconds: float, what: str) -> None:
    try:
        await within(seconds, awaitable, what)
    except TimeoutError as exc:
        log.error("%s; going on", exc)


def _cancel_remaining(loop: asyncio.AbstractEventLoop, drain_s: float) -> None:
    tasks = asyncio.all_tasks(loop)
    if not tasks:
        return
    for task in tasks:
        task.cancel()
    done, pending = loop.run_until_complete(asyncio.wait(tasks, timeout=drain_s))
    for task in pending:
        log.error("a task did not end within %gs of its cancellation, left behind: %s", drain_s,
                  where(task))
    for task in done:
        if not task.cancelled() and task.exception() is not None:
            loop.call_exception_handler({"message": "unhandled exception during shutdown",
                                         "exception": task.exception(), "task": task})


def where(task: asyncio.Task) -> str:
    """The task's coroutine and the innermost line it waits at."""
    frames = task.get_stack()
    at = f" at {frames[-1].f_code.co_filename}:{frames[-1].f_lineno}" if frames else ""
    return f"{task.get_coro().__qualname__}{at}"
