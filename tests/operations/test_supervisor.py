"""The supervisor in process: restarts with backoff, the restart counter, one traceback per failure, cancellation,
the task-failure fault. (tests/operations/test_background_tasks.py and tests/cluster/test_supervised_tasks.py fail
the broker's own tasks in running brokers.)"""

import asyncio
import logging

from prometheus_client import CollectorRegistry, generate_latest

from broker import supervisor as supervisor_module
from broker.faults import TaskFailer
from broker.supervisor import Supervisor


def failures(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "moldau.supervisor" and r.levelno == logging.ERROR]


def test_a_failing_task_restarts_with_growing_backoff_and_is_counted(caplog):
    runs: list[float] = []

    async def main():
        sup = Supervisor()
        loop = asyncio.get_running_loop()
        done = asyncio.Event()

        async def flaky():
            runs.append(loop.time())
            if len(runs) <= 3:
                raise RuntimeError(f"failure {len(runs)}")
            done.set()
            await asyncio.sleep(3600)

        task = sup.start("flaky", flaky)
        await asyncio.wait_for(done.wait(), 10)
        assert sup.running("flaky") and not task.done()
        return sup

    with caplog.at_level(logging.ERROR, logger="moldau.supervisor"):
        sup = asyncio.run(main())
    assert len(runs) == 4
    gaps = [b - a for a, b in zip(runs, runs[1:], strict=False)]
    for gap, backoff in zip(gaps, (0.1, 0.2, 0.4), strict=False):  # doubling from 0.1 s (lower bounds: a loaded machine)
        assert gap >= backoff * 0.9, gaps
    assert sup.restarts["flaky"] == 3
    records = failures(caplog)
    assert [r.getMessage() for r in records] == [
        f"background task flaky failed; restarting it in {b:.1f}s (restart {n})" for n, b in ((1, 0.1), (2, 0.2), (3, 0.4))]
    # each failure logged once, with its own traceback
    assert [str(r.exc_info[1]) for r in records] == ["failure 1", "failure 2", "failure 3"]
    for record in records:
        assert caplog.handler.formatter.formatException(record.exc_info).count("Traceback (most recent call last)") == 1


def test_the_backoff_starts_over_after_a_healthy_run(caplog, monkeypatch):
    monkeypatch.setattr(supervisor_module, "HEALTHY_S", 0.3)
    runs = []

    async def main():
        sup = Supervisor()
        done = asyncio.Event()

        async def task():
            runs.append(len(runs))
            if len(runs) == 3:
                await asyncio.sleep(0.35)  # a healthy run, then a failure
            if len(runs) < 4:
                raise ValueError("again")
            done.set()

        sup.start("t", task)
        await asyncio.wait_for(done.wait(), 10)

    with caplog.at_level(logging.ERROR, logger="moldau.supervisor"):
        asyncio.run(main())
    assert [r.getMessage().split("in ")[1].split("s ")[0] for r in failures(caplog)] == ["0.1", "0.2", "0.1"]


def test_cancellation_ends_a_task_without_a_restart_and_stop_all_ends_every_task(caplog):
    async def main():
        sup = Supervisor()
        started = asyncio.Event()

        async def forever():
            started.set()
            await asyncio.sleep(3600)

        task = sup.start("a", forever)
        sup.start("b", forever)
        spawned = sup.spawn(asyncio.sleep(3600))
        await started.wait()
        sup.stop("a")
        await asyncio.sleep(0.05)
        assert task.cancelled() and not sup.running("a") and sup.running("b")
        sup.stop_all()
        await asyncio.sleep(0.05)
        assert not sup.tasks and spawned.cancelled()
        return sup

    with caplog.at_level(logging.DEBUG, logger="moldau.supervisor"):
        sup = asyncio.run(main())
    assert not sup.restarts and not failures(caplog)


def test_a_task_that_returns_is_done_and_starting_a_name_again_replaces_its_task():
    async def main():
        sup = Supervisor()
        runs = []

        async def once(tag):
            runs.append(tag)
            await asyncio.sleep(3600 if tag == "first" else 0)

        first = sup.start("x", lambda: once("first"))
        await asyncio.sleep(0)
        second = sup.start("x", lambda: once("second"))
        await asyncio.sleep(0.05)
        assert first.cancelled() and second.done() and not second.cancelled()
        assert not sup.running("x") and runs == ["first", "second"] and not sup.restarts

    asyncio.run(main())


def test_a_one_shot_task_that_fails_is_logged_with_its_traceback_and_not_restarted(caplog):
    async def main():
        sup = Supervisor()

        async def propose():
            raise KeyError("lost")

        task = sup.spawn(propose())
        await asyncio.sleep(0.05)
        assert task.done() and not sup._spawned
        return sup

    with caplog.at_level(logging.ERROR, logger="moldau.supervisor"):
        sup = asyncio.run(main())
    (record,) = failures(caplog)
    assert "propose" in record.getMessage() and isinstance(record.exc_info[1], KeyError)
    assert not sup.restarts


def test_the_task_failure_fault_fails_the_named_task_where_it_waits_and_the_metric_counts_it(tmp_path, caplog):
    fault = tmp_path / "fail-tasks"
    ticks = []

    async def main():
        sup = Supervisor(TaskFailer(fault))

        async def ticking():
            while True:
                ticks.append(1)
                await asyncio.sleep(0.02)

        sup.start("ticker", ticking)
        sup.start("other", ticking)
        await asyncio.sleep(0.2)
        fault.write_text("ticker\nnot-running-yet\n")
        for _ in range(100):
            await asyncio.sleep(0.05)
            if sup.restarts["ticker"]:
                break
        before = len(ticks)
        await asyncio.sleep(0.4)  # restarted after 0.1 s: ticking again
        assert len(ticks) > before
        sup.start("not-running-yet", ticking)  # named before it ran: it fails as it starts, then runs
        await asyncio.sleep(0.4)
        assert sup.restarts["not-running-yet"] == 1 and sup.running("not-running-yet")
        return sup

    with caplog.at_level(logging.ERROR, logger="moldau.supervisor"):
        sup = asyncio.run(main())
    assert not fault.exists()  # taken: it fails the task once
    assert dict(sup.restarts) == {"ticker": 1, "not-running-yet": 1}
    first, second = failures(caplog)
    assert first.getMessage().startswith("background task ticker failed (fault injection")
    assert second.getMessage().startswith("background task not-running-yet failed (fault injection")
    registry = CollectorRegistry()
    registry.register(sup)
    text = generate_latest(registry).decode()
    assert 'moldau_background_task_restarts_total{task="ticker"} 1.0' in text
