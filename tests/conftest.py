"""Shared pytest fixtures: run a real Moldau broker as a subprocess.

The broker is started exactly as an operator would start it::

    python -m broker serve --override listeners=PLAINTEXT://127.0.0.1:<port> \
        --override log.dirs=<tmpdir> [--override name=value ...]

with the repository root as the working directory, in its own process group,
its stderr captured to a file so tests can assert on log lines.

Fixtures
--------
``start_broker(**overrides)``
    factory; keyword names use ``_`` for ``.`` (``num_partitions=3`` means
    ``num.partitions=3``), or pass a dict positionally for names that are not
    identifiers. A value containing ``{port}`` is formatted with the broker's
    port. Every broker it starts is killed at teardown.
``broker``
    one broker with default config and a fresh data directory.
"""

from __future__ import annotations

import atexit
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

TESTS_DIR = Path(__file__).resolve().parent
REPO_ROOT = TESTS_DIR.parent

# `helpers` (tests/helpers) and the project packages (protocol.records for the
# durability tests) must import however pytest was launched.
for _p in (str(TESTS_DIR), str(REPO_ROOT)):
    if _p not in sys.path:
        sys.path.insert(0, _p)

READY_TIMEOUT = float(os.environ.get("MOLDAU_TEST_READY_TIMEOUT", "20"))
STOP_TIMEOUT = 20.0
DEFAULT_INTEGRATION_TIMEOUT = 180  # seconds, for tests without their own timeout marker

_LIVE: set["BrokerProcess"] = set()


# Ports for the brokers and etcds the tests start: below Linux's ephemeral range (32768-60999), so no
# client's outgoing socket holds one, and split between pytest-xdist workers, so two workers never
# hand out the same port. Each worker walks its slice from a random start: a port a test let go
# (a broker killed, to restart on the same port later) comes round again only thousands of ports later.
PORTS = range(10000, 32000)
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
# a crashed worker's replacement is numbered past the count (gw3 of 3): it takes over a slice
_WORKER = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")) % _WORKERS
_SLICE = PORTS[_WORKER * len(PORTS) // _WORKERS:(_WORKER + 1) * len(PORTS) // _WORKERS]
_next_port = random.randrange(len(_SLICE))


def free_port() -> int:
    """A port of this worker's slice that nothing listens on now."""
    global _next_port
    for _ in range(len(_SLICE)):
        port = _SLICE[_next_port % len(_SLICE)]
        _next_port += 1
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue  # another run's broker, or any other program, holds it
            return port
    raise RuntimeError(f"no free port in {_SLICE}")


def port_accepts(port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout):
            return True
    except OSError:
        return False


class BrokerStartError(RuntimeError):
    pass


class BrokerProcess:
    """One broker subprocess; restartable on the same port and data dir."""

    def __init__(self, workdir: Path, overrides: dict[str, object] | None = None, port: int | None = None):
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.data_dir = self.workdir / "data"
        self.data_dir.mkdir(exist_ok=True)
        self.log_path = self.workdir / "broker.stderr.log"
        self.stdout_path = self.workdir / "broker.stdout.log"
        self.port = port if port is not None else free_port()
        self.overrides = {k: v for k, v in (overrides or {}).items()}
        self.env: dict[str, str] = {}  # added to the test's environment for this broker alone
        self.proc: subprocess.Popen | None = None
        self.starts = 0
        self.returncodes: list[int] = []
        self._log_start_offset = 0  # byte offset of the current run's first log byte

    # -- addresses -------------------------------------------------------
    @property
    def host(self) -> str:
        return "127.0.0.1"

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def ready_line(self) -> str:
        """The log line of the listener on self.port (PLAINTEXT unless `listeners` names another)."""
        name = "PLAINTEXT"
        for url in str(self.overrides.get("listeners", "")).split(","):
            if url.strip().endswith((":{port}", f":{self.port}")):
                name = url.strip().partition("://")[0]
        return f"listening on {name}://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    # -- command line ----------------------------------------------------
    def command(self) -> list[str]:
        cfg: dict[str, object] = {
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "log.dirs": str(self.data_dir),
        }
        cfg.update(self.overrides)
        cmd = [sys.executable, "-m", "broker", "serve"]
        for name, value in cfg.items():
            value = str(value)
            if "{port}" in value:
                value = value.replace("{port}", str(self.port))
            cmd += ["--override", f"{name}={value}"]
        return cmd

    # -- lifecycle -------------------------------------------------------
    def start(self, timeout: float = READY_TIMEOUT) -> "BrokerProcess":
        if self.alive():
            raise RuntimeError("broker already running")
        self._log_start_offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        env = dict(os.environ)
        env["PYTHONUNBUFFERED"] = "1"
        env.setdefault("PYTHONFAULTHANDLER", "1")
        env.update(self.env)
        with open(self.log_path, "ab") as err, open(self.stdout_path, "ab") as out:
            header = f"\n===== test harness: start #{self.starts + 1}: {' '.join(self.command())}\n"
            err.write(header.encode())
            err.flush()
            self._log_start_offset += len(header.encode())
            self.proc = subprocess.Popen(
                self.command(),
                cwd=str(REPO_ROOT),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                env=env,
                start_new_session=True,  # own process group: killpg reaches any children
            )
        self.starts += 1
        _LIVE.add(self)
        self.wait_ready(timeout)
        return self

    def wait_ready(self, timeout: float = READY_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if not self.alive():
                rc = self.proc.returncode if self.proc else None
                raise BrokerStartError(
                    f"broker exited with code {rc} before accepting connections on port {self.port}\n"
                    f"--- stderr tail ---\n{self.log_tail()}"
                )
            accepting = port_accepts(self.port)
            # both: the port answers, and it is this broker that answers (another
            # process could hold a port that free_port() handed out)
            if accepting and self.ready_line in self.log_since_start():
                return
            if time.monotonic() > deadline:
                tail = self.log_tail()
                self.kill()
                what = (
                    f"port {self.port} accepts connections but the broker never logged {self.ready_line!r}"
                    if accepting
                    else f"broker did not accept connections on port {self.port}"
                )
                raise BrokerStartError(f"{what} within {timeout:.0f}s\n--- stderr tail ---\n{tail}")
            time.sleep(0.1)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = STOP_TIMEOUT) -> int:
        """SIGTERM (clean shutdown) and wait; returns the exit code.

        Raises AssertionError if the broker ignores SIGTERM for ``timeout``
        seconds (it is then SIGKILLed so nothing leaks).
        """
        if self.proc is None:
            raise RuntimeError("broker never started")
        if self.proc.poll() is None:
            try:
                os.kill(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self._killpg()
                self.proc.wait(10)
                self._finished()
                raise AssertionError(
                    f"broker did not exit within {timeout:.0f}s of SIGTERM\n--- stderr tail ---\n{self.log_tail()}"
                ) from None
        self._killpg()  # reap stray children, if any
        return self._finished()

    def kill(self) -> int:
        """SIGKILL the whole process group (a crash) and wait."""
        if self.proc is None:
            raise RuntimeError("broker never started")
        self._killpg()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:  # pragma: no cover - kernel would have to misbehave
            pass
        return self._finished()

    def restart(self, timeout: float = READY_TIMEOUT) -> "BrokerProcess":
        """Start again on the same port and data dir (stopping cleanly first if still running)."""
        if self.alive():
            self.stop()
        return self.start(timeout)

    def _killpg(self) -> None:
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def _finished(self) -> int:
        rc = self.proc.returncode
        if len(self.returncodes) < self.starts:  # one exit code per run
            self.returncodes.append(rc)
        _LIVE.discard(self)
        return rc

    def cleanup(self) -> None:
        if self.proc is not None:
            self._killpg()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:  # pragma: no cover
                pass
        _LIVE.discard(self)

    # -- logs ------------------------------------------------------------
    def log_text(self) -> str:
        """Everything the broker wrote to stderr, across all starts."""
        if not self.log_path.exists():
            return ""
        return self.log_path.read_bytes().decode("utf-8", "replace")

    def log_offset(self) -> int:
        """Current size of the stderr log, for ``log_since``."""
        return self.log_path.stat().st_size if self.log_path.exists() else 0

    def log_since(self, offset: int) -> str:
        if not self.log_path.exists():
            return ""
        with open(self.log_path, "rb") as f:
            f.seek(offset)
            return f.read().decode("utf-8", "replace")

    def log_since_start(self) -> str:
        """stderr of the current (latest) run only."""
        return self.log_since(self._log_start_offset)

    def log_tail(self, lines: int = 60) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def wait_for_log(self, pattern: str | re.Pattern, timeout: float = 10.0, since: int = 0, flags: int = 0) -> str:
        """Wait until a log line (after byte ``since``) matches ``pattern``; returns that line."""
        rx = re.compile(pattern, flags) if isinstance(pattern, str) else pattern
        deadline = time.monotonic() + timeout
        while True:
            for line in self.log_since(since).splitlines():
                if rx.search(line):
                    return line
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"no broker log line matching {rx.pattern!r} within {timeout}s\n"
                    f"--- stderr since offset {since} (tail) ---\n"
                    + "\n".join(self.log_since(since).splitlines()[-60:])
                )
            time.sleep(0.1)

    # -- files -----------------------------------------------------------
    def partition_dir(self, topic: str, partition: int) -> Path:
        return self.data_dir / f"{topic}-{partition}"

    def segment_files(self, topic: str, partition: int) -> list[Path]:
        return sorted(self.partition_dir(topic, partition).glob("*.log"))

    def __repr__(self) -> str:
        return f"<BrokerProcess {self.bootstrap} pid={self.pid} data={self.data_dir}>"


def _normalize_overrides(positional: tuple[dict, ...], kwargs: dict) -> dict[str, object]:
    out: dict[str, object] = {}
    for d in positional:
        out.update(d)
    for k, v in kwargs.items():
        out[k.replace("_", ".")] = v
    return out


@atexit.register
def _kill_leftover_brokers() -> None:  # safety net if teardown never ran
    for b in list(_LIVE):
        b.cleanup()


# --------------------------------------------------------------------------
# pytest wiring
# --------------------------------------------------------------------------


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: long-running test (large message volumes)")
    config.addinivalue_line("markers", "integration: starts a real broker subprocess")
    # kafka-python's schema loader uses deprecated importlib.resources calls
    config.addinivalue_line("filterwarnings", "ignore::DeprecationWarning:kafka.protocol.schemas.load_json")
    config.addinivalue_line("filterwarnings", "ignore:open_text is deprecated:DeprecationWarning")
    if not hasattr(config, "workerinput") and config.pluginmanager.hasplugin("xdist"):
        # pytest-xdist's controller: a directory its workers share, where each ALONE test (below)
        # leaves a file when done
        os.environ["MOLDAU_TEST_RUN_DIR"] = tempfile.mkdtemp(prefix="moldau-tests-")


def pytest_unconfigure(config):
    if not hasattr(config, "workerinput") and "MOLDAU_TEST_RUN_DIR" in os.environ:
        shutil.rmtree(os.environ.pop("MOLDAU_TEST_RUN_DIR"), ignore_errors=True)


# --- running in pytest-xdist workers (`make test`) -----------------------------------------------
# Tests whose bounds the rest of the suite would spoil: a bystander's round trips while its broker
# decodes a million topic names. They run first, in one worker, while the other workers wait.
ALONE = ("tests/reliability/test_request_sizes.py",)
# The heaviest tests (Spark, clusters under faults, abusive clients), longest first, dealt into two
# groups that one worker each runs in turn: no more than two of them share the machine at once.
HEAVY = (
    "tests/pipeline/test_pipeline_e2e.py",
    "tests/cluster/test_cluster_replicas.py::test_a_write_from_a_past_leadership",
    "tests/reliability/test_cluster_partitions.py",
    "tests/reliability/test_abusive_requests.py",
    "tests/reliability/test_etcd_faults.py",
    "tests/reliability/test_cluster_model.py",
    "tests/reliability/test_broker_pause.py",
    "tests/reliability/test_app_crash_loop.py",
    "tests/reliability/test_cluster_faults.py",
    "tests/reliability/test_damaged_files.py",
    "tests/cluster/test_coordinator_failover.py",
    "tests/cluster/test_consumer_group_failover.py",
    "tests/cluster/test_share_group_failover.py",
)
# The next longest (15-40 s each), started right after: started last, one of them would keep a worker
# busy long after the others ran out of tests.
LONG = (
    "tests/cluster/test_fast_failover.py",
    "tests/cluster/test_idle_isr.py",
    "tests/cluster/test_cluster_transactions_clients.py::test_markers_follow_a_partition_whose_leader_moved",
    "tests/cluster/test_cluster_topic_claims.py",
    "tests/cluster/test_supervised_tasks.py",
    "tests/security/test_sasl.py",
    "tests/console/test_console.py::test_console_pages_in_chromium",
    "tests/console/test_console_cluster.py",
    "tests/reliability/test_wire_fuzz.py",
    "tests/integration/test_topic_configs.py",
    "tests/reliability/test_txn_model.py",
    "tests/integration/test_compaction.py",
    "tests/cluster/test_cluster_metadata.py",
    "tests/cluster/test_cluster_configs.py",
    "tests/cluster/test_metadata_convergence.py",
    "tests/cluster/test_list_offsets_leader_change.py",
    "tests/integration/test_idempotence.py",
    "tests/cluster/test_cluster_fetch_sessions.py",
    "tests/integration/test_java_clients.py",
    "tests/integration/test_consumer_group_protocol_java.py",
    "tests/integration/test_share_groups_java.py",
    "tests/integration/test_share_groups.py",
    "tests/reliability/test_request_queue.py",
    "tests/reliability/test_kill_loop.py",
    "tests/bench/test_bench_smoke.py",
    "tests/cluster/test_local_cluster.py::test_readme_cluster_steps",
)
FIRST = (*ALONE, *HEAVY, *LONG)


def _rank(nodeid: str, prefixes: tuple[str, ...]) -> int | None:
    return next((rank for rank, prefix in enumerate(prefixes) if nodeid.startswith(prefix)), None)


def _group(nodeid: str) -> str | None:
    """The tests one worker runs in turn (ALONE, each half of HEAVY); None: any worker, any time."""
    if _rank(nodeid, ALONE) is not None:
        return "alone"
    heavy = _rank(nodeid, HEAVY)
    return None if heavy is None else f"heavy-{heavy % 2}"


# A test that may start a process is marked ``process``: one using a fixture that starts one (directly or
# through another fixture), or any test of a module that starts them itself (its source names one of
# PROCESS_WORDS; marking an in-process neighbour too costs nothing). tests/unit is marked ``unit`` and may
# start none (tests/unit/conftest.py refuses it).
UNIT_TESTS = Path(__file__).parent / "unit"
PROCESS_FIXTURES = frozenset({"start_broker", "start_cluster", "java", "java4", "spark", "start_console"})
PROCESS_WORDS = re.compile(r"subprocess|Popen|sys\.executable|BrokerProcess|LocalEtcd|start_broker|start_cluster"
                           r"|helpers\.(cluster|console|java_clients|pipeline)")
_starts_processes: dict[Path, bool] = {}


def _module_starts_processes(path: Path) -> bool:
    if path not in _starts_processes:
        _starts_processes[path] = bool(PROCESS_WORDS.search(path.read_text(errors="replace")))
    return _starts_processes[path]


def pytest_collection_modifyitems(config, items):
    items.sort(key=lambda item: _rank(item.nodeid, (*FIRST, "")))  # stable: the others keep their order
    for item in items:
        if UNIT_TESTS in item.path.parents:
            item.add_marker(pytest.mark.unit)
        elif PROCESS_FIXTURES.intersection(getattr(item, "fixturenames", ())) or _module_starts_processes(item.path):
            item.add_marker(pytest.mark.process)
        if "integration" in item.path.parts:
            item.add_marker(pytest.mark.integration)
            if item.get_closest_marker("timeout") is None:
                item.add_marker(pytest.mark.timeout(DEFAULT_INTEGRATION_TIMEOUT))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """pytest-xdist's controller: each test is a unit of work on its own, except that a group is one
    unit; units go out in collection order, one at a time as workers finish theirs."""
    if config.getvalue("dist") != "load":  # (the default of -n; another --dist is obeyed as given)
        return None
    from xdist.scheduler import LoadScopeScheduling

    class Scheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _group(nodeid) or nodeid

    config.option.loadscopereorder = False  # (it would put the groups first, the longest tests after them)
    return Scheduling(config, log)


_ALONE_KEY = pytest.StashKey[list]()


def pytest_collection_finish(session):
    # every worker collects the same tests: each knows the ALONE ones by their place in this list
    session.config.stash[_ALONE_KEY] = [item for item in session.items if _rank(item.nodeid, ALONE) is not None]


@pytest.hookimpl(wrapper=True, tryfirst=True)  # outside pytest-timeout: the wait is not the test's time
def pytest_runtest_protocol(item, nextitem):
    alone = item.config.stash.get(_ALONE_KEY, [])
    run_dir = os.environ.get("MOLDAU_TEST_RUN_DIR")
    if not (hasattr(item.config, "workerinput") and run_dir and alone):
        return (yield)
    done = [Path(run_dir) / f"alone-{i}.done" for i in range(len(alone))]
    if item not in alone:
        deadline = time.monotonic() + 1800  # a worker that died with its ALONE test holds nobody up forever
        while not all(path.exists() for path in done) and time.monotonic() < deadline:
            time.sleep(0.5)
    try:
        return (yield)
    finally:
        if item in alone:
            done[alone.index(item)].touch()


_REPORT_KEY = pytest.StashKey[dict]()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    rep = yield
    item.stash.setdefault(_REPORT_KEY, {})[rep.when] = rep
    return rep


@pytest.fixture
def start_broker(request, tmp_path_factory):
    """Factory: ``start_broker(num_partitions=3)`` or ``start_broker({"log.segment.bytes": 1<<20})``."""
    started: list[BrokerProcess] = []

    def _start(*positional: dict, autostart: bool = True, **kwargs) -> BrokerProcess:
        workdir = tmp_path_factory.mktemp("broker")
        b = BrokerProcess(workdir, _normalize_overrides(positional, kwargs))
        started.append(b)
        if autostart:
            for attempt in range(3):
                try:
                    b.start()
                    break
                except BrokerStartError as exc:
                    # free_port() can race with another process grabbing the port
                    if attempt < 2 and "in use" in str(exc).lower():
                        b.port = free_port()
                        continue
                    pytest.fail(str(exc), pytrace=False)
        return b

    yield _start

    reports = request.node.stash.get(_REPORT_KEY, {})
    failed = any(r.failed for r in reports.values())
    for b in started:
        if failed:
            sys.stderr.write(f"\n----- {b!r} stderr tail (test failed) -----\n{b.log_tail(80)}\n")
        b.cleanup()


@pytest.fixture
def broker(start_broker) -> BrokerProcess:
    """A broker with default config and a fresh data directory."""
    return start_broker()


@pytest.fixture(scope="session")
def java(tmp_path_factory):
    """Java kafka-clients 3.9 (tests/helpers/java_clients.py), compiled once per session."""
    from helpers.java_clients import JavaClients, JavaUnavailable

    try:
        return JavaClients.build(tmp_path_factory.mktemp("java"))
    except JavaUnavailable as exc:  # make test-deps installs them: a missing jar is a broken install step
        pytest.fail(f"Java clients unavailable: {exc}", pytrace=False)


@pytest.fixture(scope="session")
def certs(tmp_path_factory):
    """A CA, the broker's key store and client certificates, made by trustme (tests/helpers/security.py)."""
    from helpers.security import make_certs

    return make_certs(tmp_path_factory.mktemp("certs"))
