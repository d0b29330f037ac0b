"""Shared by the fault tests in tests/reliability: budgets, workload processes,
`moldau verify`, memory readings and the results summary.

Every fault test has a short budget for `make test` and a long one for
`make chaos` (MOLDAU_CHAOS=1); single budgets can be overridden by their own
environment variable, e.g. MOLDAU_CHAOS_CYCLES=50.
"""

from __future__ import annotations

import fcntl
import json
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

from helpers.kafka import admin, consumer, create_topic, watermarks

REPO_ROOT = Path(__file__).resolve().parents[2]
CHAOS = os.environ.get("MOLDAU_CHAOS") == "1"
RESULTS_DIR = Path(os.environ.get("MOLDAU_RESULTS_DIR", REPO_ROOT / "results" / "reliability"))


def seeded_random(what: str) -> tuple[random.Random, int]:
    """The random moments of a fault loop, and their seed: MOLDAU_CHAOS_SEED replays a run's."""
    seed = int(os.environ.get("MOLDAU_CHAOS_SEED", time.time_ns() % 1_000_000))
    print(f"{what}, seed {seed}")
    return random.Random(seed), seed


def budget(ci: float, chaos: float, env: str | None = None) -> float:
    """The long value under `make chaos`, the short one otherwise; ``env`` overrides both."""
    if env and env in os.environ:
        return type(ci)(os.environ[env])
    return chaos if CHAOS else ci


# --- processes -------------------------------------------------------------------


class WorkloadProcess:
    """One `python -m verify.workloads` process, journaling into ``journal_dir``."""

    def __init__(self, workload: str, bootstrap: str, journal_dir: Path, name: str, **options) -> None:
        self.name = name
        self.stderr_path = journal_dir.parent / f"{name}.stderr"
        argv = [sys.executable, "-m", "verify.workloads", workload, "--bootstrap", bootstrap,
                "--journal", str(journal_dir), "--name", name]
        for option, value in options.items():
            argv += [f"--{option.replace('_', '-')}", str(value)]
        with open(self.stderr_path, "ab") as stderr:  # a restarted process adds to its predecessor's
            self.proc = subprocess.Popen(argv, cwd=REPO_ROOT, stdin=subprocess.DEVNULL,
                                         stdout=subprocess.DEVNULL, stderr=stderr)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, timeout: float) -> int:
        """SIGTERM and wait for the exit code; a process that does not exit in time is killed and fails."""
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
            raise AssertionError(f"{self.name} did not stop within {timeout}s of SIGTERM\n{self.stderr_tail()}") from None

    def __enter__(self) -> "WorkloadProcess":
        return self

    def __exit__(self, *exc) -> None:
        self.kill()

    def kill(self) -> None:
        """Whatever happened in the test, the process is gone afterwards."""
        if self.alive():
            self.proc.kill()
            self.proc.wait(10)

    def stderr_tail(self, lines: int = 20) -> str:
        return "\n".join(self.stderr_path.read_text(errors="replace").splitlines()[-lines:])


def journal_lines(journal_dir: Path) -> int:
    """Lines written to the journal so far: a cheap progress meter."""
    return sum(path.read_bytes().count(b"\n") for path in journal_dir.glob("*.jsonl"))


def wait_for(check, timeout: float, what: str, interval: float = 0.2):
    deadline = time.monotonic() + timeout
    while not (result := check()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)
    return result


@dataclass(frozen=True)
class Workload:
    """One process of a plan: a `verify.workloads` name, the process's name and its options."""

    kind: str
    name: str
    options: dict = field(default_factory=dict)

    @property
    def consumes(self) -> bool:
        return "group" in self.options


TOPIC, COPY_TOPIC, PARTITIONS = "chaos", "chaos-copy", 3

# What runs through broker outages: every kind in verify.workloads.WORKLOADS, each process
# journaling into one directory. Producers stop first, consumers once their group caught up.
PLAN = [
    Workload("idempotent-producer", "idem-0", {"topic": TOPIC, "partitions": PARTITIONS, "rate": 1200}),
    Workload("idempotent-producer", "idem-1", {"topic": TOPIC, "partitions": PARTITIONS, "rate": 1200,
                                               "record_size": 1000}),
    Workload("transactional-producer", "txn-0", {"topic": TOPIC, "partitions": PARTITIONS, "rate": 600,
                                                 "txn_size": 6, "abort_every": 4}),
    Workload("group-consumer", "reader-0", {"topic": TOPIC, "group": "chaos-readers"}),
    Workload("group-consumer", "reader-1", {"topic": TOPIC, "group": "chaos-readers"}),
    Workload("copy-app", "copy-0", {"topic": TOPIC, "output": COPY_TOPIC, "group": "chaos-copier"}),
]
DRAIN_TIMEOUT = 120  # seconds a stopping producer may take for its last acknowledgements


class WorkloadRun:
    """The PLAN's processes against one broker, from start to a verified end. Used as a context
    manager, so that a failing test leaves no workload running."""

    def __init__(self, broker, journal_dir: Path, plan: list[Workload] = PLAN) -> None:
        self.broker = broker
        self.journal_dir = journal_dir
        self.plan = plan
        for topic in (TOPIC, COPY_TOPIC):
            create_topic(broker.bootstrap, topic, PARTITIONS)
        self.processes = [WorkloadProcess(w.kind, broker.bootstrap, journal_dir, w.name, **w.options) for w in plan]

    def __enter__(self) -> "WorkloadRun":
        return self

    def __exit__(self, *exc) -> None:
        for p in self.processes:
            p.kill()

    def kill_and_restart(self, name: str, pause: float = 0.0) -> None:
        """SIGKILL the process ``name`` wherever it is, and start it again under the same name
        (for a transactional app: the same transactional.id) after ``pause`` seconds."""
        i = next(i for i, w in enumerate(self.plan) if w.name == name)
        self.processes[i].kill()
        time.sleep(pause)
        w = self.plan[i]
        self.processes[i] = WorkloadProcess(w.kind, self.broker.bootstrap, self.journal_dir, w.name, **w.options)

    def wait_for_progress(self, what: str, lines: int = 100) -> None:
        """Wait until the clients have journaled ``lines`` more events, and check none has exited."""
        before = journal_lines(self.journal_dir)
        wait_for(lambda: journal_lines(self.journal_dir) > before + lines, 60, f"client progress {what}")
        for p in self.processes:
            assert p.alive(), f"{p.name} exited:\n{p.stderr_tail()}"

    def finish(self) -> dict:
        """Stop the producers, let the groups catch up, stop the consumers; returns `moldau verify`'s verdict."""
        try:
            for p, w in zip(self.processes, self.plan, strict=False):
                if not w.consumes:
                    assert p.stop(DRAIN_TIMEOUT + 30) == 0, f"{p.name} failed:\n{p.stderr_tail()}"
            for group, topic in {(w.options["group"], w.options["topic"]) for w in self.plan if w.consumes}:
                wait_for(lambda: group_caught_up(self.broker.bootstrap, group, topic, PARTITIONS), 90,
                         f"group {group} to catch up")
        finally:
            codes = {p.name: p.stop(30) for p in self.processes}
        assert set(codes.values()) == {0}, f"workload exit codes {codes}"
        verdict = assert_verified(self.broker.bootstrap, self.journal_dir)
        # every producer got every record acknowledged in the end
        assert not verdict["notes"], verdict["notes"]
        return verdict


def group_caught_up(bootstrap: str, group: str, topic: str, partitions: int) -> bool:
    """Whether ``group`` has committed the high watermark of every partition of ``topic``."""
    c, _ = consumer(bootstrap)
    try:
        ends = {p: watermarks(c, topic, p)[1] for p in range(partitions)}
    finally:
        c.close()
    request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in range(partitions)])
    client = admin(bootstrap)  # referenced until the answer is in: a collected client never completes its futures
    listed = client.list_consumer_group_offsets([request])[group].result(20)
    return all(tp.offset == ends[tp.partition] for tp in listed.topic_partitions)


def run_verify(bootstrap: str, journal_dir: Path, timeout: float = 90.0) -> tuple[int, str, dict | None]:
    """`moldau verify` as an operator runs it: (exit code, printed verdict, JSON verdict if written)."""
    json_path = journal_dir.parent / f"{journal_dir.name}-verdict.json"
    json_path.unlink(missing_ok=True)
    done = subprocess.run(
        [sys.executable, "-m", "broker", "verify", str(journal_dir), "--bootstrap", bootstrap,
         "--timeout", str(timeout / 2), "--json", str(json_path)],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=timeout,
    )
    verdict = json.loads(json_path.read_text()) if json_path.exists() else None
    return done.returncode, done.stdout + done.stderr, verdict


def assert_verified(bootstrap: str, journal_dir: Path) -> dict:
    """Run `moldau verify`, require a pass, return its JSON verdict."""
    code, output, verdict = run_verify(bootstrap, journal_dir)
    assert code == 0 and verdict is not None and verdict["ok"], f"moldau verify failed (exit {code}):\n{output}"
    print(output)
    return verdict


# --- measurements and results ------------------------------------------------------


def peak_rss_mib(pid: int) -> float:
    """The process's peak resident set size so far (VmHWM), in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmHWM in /proc/{pid}/status")


def rss_mib(pid: int) -> float:
    """The process's resident set size now (VmRSS), in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS in /proc/{pid}/status")


def record_result(name: str, **result) -> None:
    """Keep one test's figures in the results directory and rewrite summary.json and summary.txt
    from every test's latest figures."""
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    entry = {"profile": "chaos" if CHAOS else "ci", "finished": time.strftime("%Y-%m-%d %H:%M:%S"), **result}
    with open(RESULTS_DIR / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # tests in other pytest-xdist workers record theirs too
        (RESULTS_DIR / f"{name}.json").write_text(json.dumps(entry, indent=2) + "\n")
        entries = {path.stem: json.loads(path.read_text()) for path in sorted(RESULTS_DIR.glob("*.json"))
                   if path.name != "summary.json"}
        (RESULTS_DIR / "summary.json").write_text(json.dumps(entries, indent=2) + "\n")
        lines = []
        for test, figures in entries.items():
            lines.append(f"{test} ({figures['profile']}, {figures['finished']}):")
            lines += [f"  {key}: {value}" for key, value in figures.items() if key not in ("profile", "finished")]
        (RESULTS_DIR / "summary.txt").write_text("\n".join(lines) + "\n")
