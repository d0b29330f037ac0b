"""`moldau cluster up` as a real local cluster (issue 28), driven by README's cluster-steps commands: a
broker that exits is reported and left down while the others serve, `moldau cluster start N` brings it
back, `stop N` stops one, each broker has its own metrics port, SIGTERM stops everything within seconds,
and a killed `up` leaves no process behind."""

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import psutil
import pytest
from confluent_kafka.admin import AdminClient

from helpers.readme import block

from conftest import REPO_ROOT, free_port

STEPS = block("cluster-steps")  # `moldau cluster up --brokers 3`, then status, stop 2, start 2
MOLDAU = [sys.executable, "-m", "broker"]

FAST = ["etcd.session.timeout.ms=4000", "offsets.topic.num.partitions=3", "transaction.state.log.num.partitions=3",
        "group.initial.rebalance.delay.ms=0"]


def consecutive_ports(n: int) -> int:
    """The first of ``n`` consecutive free ports."""
    for _ in range(50):
        first = free_port()
        socks = []
        try:
            for port in range(first, first + n):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", port))
            return first
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no consecutive free ports")


class Up:
    def __init__(self, data, up: str):
        """``up``: a `moldau cluster up` command line; its data directory, ports and timings are the test's."""
        self.data = data
        brokers = int(up.split("--brokers")[1].split()[0])
        self.port = consecutive_ports(2 * brokers)
        self.metrics = self.port + brokers
        command = [*MOLDAU, *up.split()[1:], "--data", str(data), "--port", str(self.port),
                   "--override", f"metrics.port={self.metrics}"]
        for item in FAST:
            command += ["--override", item]
        self.out_path = data.parent / f"{data.name}.out"
        with open(self.out_path, "wb") as out:
            self.proc = subprocess.Popen(command, cwd=REPO_ROOT, stdin=subprocess.DEVNULL, stdout=out,
                                         stderr=subprocess.STDOUT, start_new_session=True)
        self.wait_for_output("bootstrap servers:", 60)

    def output(self) -> str:
        return self.out_path.read_text()

    def wait_for_output(self, text: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.output():
            assert self.proc.poll() is None, self.output()
            assert time.monotonic() < deadline, f"{text!r} not in:\n{self.output()}"
            time.sleep(0.2)

    def command(self, line: str) -> subprocess.CompletedProcess:
        """A `moldau cluster ...` command line, asking this `up` (its --data)."""
        assert line.startswith("moldau cluster ")
        return subprocess.run([*MOLDAU, *line.split()[1:], "--data", str(self.data)],
                              cwd=REPO_ROOT, capture_output=True, text=True, timeout=90)

    def descendants(self) -> list[psutil.Process]:
        return psutil.Process(self.proc.pid).children(recursive=True)

    def wait_serving(self, node: int, timeout: float = 60) -> None:
        log = self.data / f"broker-{node}.log"
        deadline = time.monotonic() + timeout
        want = f"listening on PLAINTEXT://127.0.0.1:{self.port + node - 1}"
        while not (log.exists() and log.read_text().count(want) >= 1):
            assert time.monotonic() < deadline, f"broker {node} never listened:\n{log.read_text()[-3000:]}"
            time.sleep(0.2)

    def kill(self) -> None:
        if self.proc.poll() is None:
            for p in self.descendants():
                p.kill()
            self.proc.kill()
            self.proc.wait(10)


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        return response.read().decode()


def wait_gone(processes: list[psutil.Process], timeout: float) -> None:
    _, alive = psutil.wait_procs(processes, timeout=timeout)
    assert not alive, f"still running: {[(p.pid, p.cmdline()[:4]) for p in alive]}"


def wait_for_brokers(admin, want: set[int], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while (brokers := set(admin.list_topics(timeout=10).brokers)) != want:
        assert time.monotonic() < deadline, brokers
        time.sleep(0.5)


@pytest.mark.timeout(240)
def test_readme_cluster_steps_a_broker_that_exits_is_reported_left_down_and_started_again(tmp_path):
    up_line, status_line, stop_line, start_line = STEPS
    assert (status_line, stop_line, start_line) == ("moldau cluster status", "moldau cluster stop 2",
                                                    "moldau cluster start 2")
    up = Up(tmp_path / "cluster", up_line)
    try:
        for node in (1, 2, 3):
            up.wait_serving(node)
        # each broker on its own metrics port (the override names the first one's)
        for node in (1, 2, 3):
            assert "kafka_server_replicamanager_partitioncount" in scrape(up.metrics + node - 1)
        status = up.command(status_line)
        assert status.returncode == 0
        pids = {int(line.split()[1]): int(line.split("pid ")[1].rstrip(")"))
                for line in status.stdout.splitlines() if "up (pid" in line}
        assert pids.keys() == {1, 2, 3}, status.stdout

        # a crash: reported, left down, the other two serve (the controller sees broker 2 gone)
        os.kill(pids[2], signal.SIGKILL)
        up.wait_for_output("broker 2 exited with status -9", 30)
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{up.port}"})
        wait_for_brokers(admin, {1, 3})
        assert up.proc.poll() is None
        assert "down (exit status -9)" in up.command(status_line).stdout

        started = up.command(start_line)
        assert started.returncode == 0 and "broker 2" in started.stdout and "up (pid" in started.stdout
        wait_for_brokers(admin, {1, 2, 3})

        stopped = up.command(stop_line)  # a controlled shutdown, not reported as an exit
        assert stopped.returncode == 0 and "broker 2" in stopped.stdout and "down" in stopped.stdout
        wait_for_brokers(admin, {1, 3})
        assert up.output().count("broker 2 exited") == 1

        assert up.command("moldau cluster stop 9").returncode == 1  # no such broker: one line, non-zero
        children = up.descendants()
        assert len(children) >= 3  # two brokers and the etcd
        started = time.monotonic()
        up.proc.send_signal(signal.SIGTERM)
        up.proc.wait(45)
        assert time.monotonic() - started < 40
        wait_gone(children, 5)
    finally:
        up.kill()


@pytest.mark.timeout(120)
def test_a_killed_up_leaves_no_process_behind(tmp_path):
    up = Up(tmp_path / "cluster", "moldau cluster up --brokers 1")
    try:
        up.wait_serving(1)
        children = up.descendants()
        assert len(children) == 2
        up.proc.kill()
        up.proc.wait(10)
        wait_gone(children, 40)
    finally:
        up.kill()
