"""For the pipeline tests: topics read with a plain consumer, totals computed in plain Python, the job as a process."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, KafkaError, TopicPartition

from helpers.kafka import admin, consumer, topic_partitions
from pipeline.events import WINDOW_MS, Event

REPO_ROOT = Path(__file__).resolve().parents[2]

Record = tuple  # (partition, offset, key, value)

# A wait gives up after STALL_S seconds with no sign of progress, or after CAP_S seconds in all. On a
# machine loaded many times over every step of a Spark job is slower but none stops: a fixed budget
# failed such runs (at a load of 15 on two cores) and waited out its whole length for a stuck one.
STALL_S = 120.0
CAP_S = 900.0
CPU_STEP_S = 3.0  # CPU seconds of a job that count as one step of progress (an idle job takes minutes)


class Progress:
    """A deadline that moves: ``check`` fails once none of ``signs`` (functions returning anything
    comparable) has changed for ``stall`` seconds, or ``cap`` seconds after the wait began."""

    def __init__(self, what: str, *signs: Callable[[], object], stall: float = STALL_S, cap: float = CAP_S):
        self.what = what
        self.signs = signs
        self.stall = stall
        self.cap = cap
        self.started = self.moved = time.monotonic()
        self.last = [sign() for sign in signs]

    def check(self, details: Callable[[], str] = lambda: "") -> None:
        now = time.monotonic()
        state = [sign() for sign in self.signs]
        if state != self.last:
            self.last, self.moved = state, now
        assert now - self.moved < self.stall, f"{self.what}: no progress in {self.stall:.0f}s; {details()}"
        assert now - self.started < self.cap, f"{self.what}: not done in {self.cap:.0f}s; {details()}"


def read_topic(bootstrap: str, topic: str, isolation: str = "read_committed", *, timeout: float = 60.0) -> list[Record]:
    """Every record of ``topic`` that ``isolation`` shows, partition by partition in offset order;
    fails after ``timeout`` seconds in which nothing more was read.

    Reads each partition to its end-of-partition event, which under
    read_committed comes at the last stable offset. Transaction markers are
    never returned, nor under read_committed aborted records, so offsets can
    have gaps.
    """
    partitions = sorted(topic_partitions(admin(bootstrap), topic))
    c, errors = consumer(bootstrap, isolation_level=isolation, enable_partition_eof=True)
    try:
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        got: list[Record] = []
        pending = set(partitions)
        progress = Progress(f"reading {topic}", lambda: (len(got), len(pending)), stall=timeout)
        while pending:
            progress.check(lambda: f"{pending} not read to their end; {errors[:3]}")
            for m in c.consume(1000, 0.5):
                err = m.error()
                if err is None:
                    got.append((m.partition(), m.offset(), m.key(), m.value()))
                elif err.code() == KafkaError._PARTITION_EOF:
                    pending.discard(m.partition())
                else:
                    raise AssertionError(f"consumer error on {topic}[{m.partition()}]: {err}")
        return sorted(got, key=lambda r: (r[0], r[1]))
    finally:
        c.close()


def topic_values(bootstrap: str, topic: str, isolation: str = "read_committed") -> Counter:
    return Counter(value for _, _, _, value in read_topic(bootstrap, topic, isolation))


def wait_for_output(bootstrap: str, topic: str, records: int, running: Callable[[], None],
                    *signs: Callable[[], object]) -> None:
    """Tail ``topic`` until it holds ``records`` output records; ``running`` fails the test if the job died.

    Gives up once neither the output nor any of ``signs`` (the job's own signs of progress) has moved
    for STALL_S seconds, or after CAP_S seconds in all."""
    tail = OutputTail(bootstrap, topic)
    try:
        progress = Progress(f"{topic}: waiting for {records} output records", tail.count, *signs)
        while tail.count() < records:
            running()
            progress.check(lambda: f"{tail.count()} so far")
            tail.poll(1.0)
    finally:
        tail.close()


class OutputTail:
    """One read_committed consumer following the output topic from its start: how many output records
    it holds so far (cheaper and quicker to notice than reading the topic again and again)."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.consumer, self.errors = consumer(bootstrap, isolation_level="read_committed")
        partitions = topic_partitions(admin(bootstrap), topic)
        self.consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        self.records: list[Record] = []

    def poll(self, timeout: float) -> None:
        for m in self.consumer.consume(1000, timeout):
            assert m.error() is None, f"consumer error on {m.topic()}[{m.partition()}]: {m.error()}"
            self.records.append((m.partition(), m.offset(), m.key(), m.value()))

    def count(self) -> int:
        return sum(output_totals(self.records).values())

    def close(self) -> None:
        self.consumer.close()


def expected_totals(events: list[Event]) -> Counter:
    """(key, window start, window end, count, amount) of each window, aggregated here without Spark.

    A Counter, so that comparing with the output also catches a window written twice.
    """
    sums: dict[tuple[str, int], list[int]] = {}
    for e in events:
        start = e.ts - e.ts % WINDOW_MS
        total = sums.setdefault((e.key, start), [0, 0])
        total[0] += 1
        total[1] += e.amount
    return Counter((key, start, start + WINDOW_MS, n, amount) for (key, start), (n, amount) in sums.items())


def output_totals(records: list[Record]) -> Counter:
    """The job's output records in the shape of ``expected_totals``; the record key must match the value's."""
    totals = Counter()
    for _, _, key, value in records:
        t = json.loads(value)
        assert key == t["key"].encode(), f"record key {key!r} differs from its value {t}"
        totals[(t["key"], t["window_start"], t["window_end"], t["count"], t["amount"])] += 1
    return totals


class JobProcess:
    """``moldau pipeline run`` as a process of its own: the driver, its JVM and Spark's Python workers.

    PySpark's worker daemon moves itself into a process group of its own, so
    ``kill`` finds the whole tree through /proc and SIGKILLs every process in
    it, like a machine that loses power.
    """

    def __init__(self, args: list[str], log_path: Path, env: dict[str, str] | None = None):
        self.args = args
        self.log_path = log_path
        self.env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
        self.proc: subprocess.Popen | None = None
        self._log_start = 0

    def start(self) -> "JobProcess":
        self._log_start = self.log_path.stat().st_size if self.log_path.exists() else 0
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "broker", "pipeline", "run", *self.args],
                                         cwd=REPO_ROOT, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                         env=self.env, start_new_session=True)
        return self

    def log(self) -> str:
        """What this run (since its start) wrote."""
        with open(self.log_path, "rb") as f:
            f.seek(self._log_start)
            return f.read().decode("utf-8", "replace")

    def signs(self) -> tuple[Callable[[], object], ...]:
        """What moves while the job works (for ``Progress``): its log; its checkpoint, where each micro-batch
        writes; its CPU time in steps of CPU_STEP_S, for Spark starting or a batch running on a loaded machine."""
        checkpoint = Path(self.args[self.args.index("--checkpoint") + 1])
        return (lambda: self.log_path.stat().st_size, lambda: files_under(checkpoint),
                lambda: _cpu_seconds(_process_tree(self.proc.pid)) // CPU_STEP_S)

    def wait_for_log(self, pattern: str) -> re.Match:
        progress = Progress(f"waiting for a log line matching {pattern!r}", *self.signs())
        while True:
            match = re.search(pattern, self.log())
            if match:
                return match
            self.running()
            progress.check(lambda: "\n" + self.tail())
            time.sleep(0.5)

    def running(self) -> None:
        assert self.proc.poll() is None, f"the job exited with {self.proc.returncode}\n{self.tail()}"

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.log().splitlines()[-lines:])

    def kill(self) -> None:
        for pid in _process_tree(self.proc.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> int:
        """SIGTERM, as Ctrl-C would: the job stops its query and exits; returns the exit code."""
        progress = Progress("waiting for the job to stop", *self.signs())
        self.proc.send_signal(signal.SIGTERM)
        try:
            while self.proc.poll() is None:
                progress.check(lambda: "\n" + self.tail())
                time.sleep(0.5)
            return self.proc.returncode
        finally:
            self.kill()  # whatever is left, if anything

    def cleanup(self) -> None:
        if self.proc is not None:
            self.kill()


def files_under(directory: Path) -> list[tuple[str, int]]:
    """(path, size) of every file under ``directory``, skipping those that vanish while listed."""
    found = []
    for path in directory.rglob("*"):
        with contextlib.suppress(OSError):
            if path.is_file():
                found.append((str(path), path.stat().st_size))
    return sorted(found)


def _cpu_seconds(pids: list[int]) -> float:
    """CPU time of the processes and of the children they have reaped."""
    ticks = 0
    for pid in pids:
        with contextlib.suppress(OSError):
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            ticks += sum(int(f) for f in fields[11:15])  # utime, stime, cutime, cstime
    return ticks / os.sysconf("SC_CLK_TCK")


def _process_tree(root: int) -> list[int]:
    """``root`` and every process descended from it, from /proc."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            fields = stat.read_text().rsplit(")", 1)[1].split()  # after "pid (comm)": state, ppid, ...
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    tree, todo = [], [root]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo.extend(children.get(pid, []))
    return tree
