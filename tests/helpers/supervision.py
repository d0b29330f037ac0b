"""Failing a running broker's background tasks (MOLDAU_FAULT_FAIL_TASKS_FILE) and reading what its supervisor
made of it: the restart counter on the metrics port, the failure lines and their tracebacks in the log."""

from __future__ import annotations

import re
import time
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

FAIL_FILE = "fail-tasks"  # in each broker's data directory
ENV = {"MOLDAU_FAULT_FAIL_TASKS_FILE": FAIL_FILE}
TRACEBACK = "Traceback (most recent call last)"


def restarts(metrics_port: int) -> dict[str, float]:
    """moldau_background_task_restarts_total by task, from one HTTP scrape."""
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {s.labels["task"]: s.value for family in text_string_to_metric_families(text)
            for s in family.samples if s.name == "moldau_background_task_restarts_total"}


def request_failures(broker, names: list[str]) -> int:
    """Ask ``broker`` to fail each named task once; returns the log offset of just before."""
    since = broker.log_offset()
    staged = broker.data_dir / (FAIL_FILE + ".new")
    staged.write_text("".join(name + "\n" for name in names))
    staged.rename(broker.data_dir / FAIL_FILE)  # whole at once: the broker may look at any moment
    return since


def wait_failed(broker, names: list[str], since: int, timeout: float = 30.0) -> str:
    """The broker's log from ``since`` once each named task's failure is logged with its first restart."""
    for name in names:
        broker.wait_for_log(rf"background task {re.escape(name)} failed \(fault injection: \S+\); restarting it in "
                            r"0\.1s \(restart 1\)", timeout=timeout, since=since)
    time.sleep(0.5)  # the tracebacks follow their lines
    return broker.log_since(since)


def fail_tasks(broker, names: list[str]) -> str:
    """Fail each named task of ``broker`` once; its log from just before, once every failure is logged."""
    return wait_failed(broker, names, request_failures(broker, names))


def failures_logged(log: str) -> tuple[list[str], int]:
    """(the tasks whose failure the log shows, the tracebacks in it)."""
    return re.findall(r"background task (\S+) failed", log), log.count(TRACEBACK)
