"""`moldau cluster up`: an etcd and N brokers on 127.0.0.1, to try a cluster on one machine.

Each broker is its own `moldau serve` process (node.id 1..N, ports from --port on, data in
DIR/broker-<id>, its log in DIR/broker-<id>.log); the etcd keeps its data in DIR/etcd. The `up`
process supervises them all: a broker that exits (a crash, a kill -9) is reported and left down, so a
failover can be watched, until `moldau cluster start N` starts it again (`stop N` and `restart N` do
a controlled shutdown first). Those commands reach the `up` process of the same DIR over a local
socket; it alone starts and stops the processes, which die with it even when it is killed (Linux's
parent-death signal). Ctrl-C or SIGTERM stops every broker at once, then the etcd.
"""

from __future__ import annotations

import hashlib
import select
import signal
import socket
import subprocess
import sys
from pathlib import Path

from storage.errors import LogDirInUse
from storage.files import lock_directory

from .local_etcd import EtcdNotFound, LocalEtcd, die_with_parent

STOP_S = 30.0  # a broker's controlled shutdown, bounded by its own steps (broker/shutdown.py)
INSTALL_CLUSTER = "pip install 'moldau[cluster]'"


def control_address(data: Path) -> str:
    """An abstract socket named after DIR: nothing left on disk, and a second `up` of DIR cannot bind it."""
    return "\0moldau-cluster-" + hashlib.sha256(str(data.resolve()).encode()).hexdigest()[:32]


class LocalBroker:
    def __init__(self, node: int, command: list[str], log_path: Path, port: int, metrics_port: int | None):
        self.node = node
        self.command = command
        self.log_path = log_path
        self.port = port
        self.metrics_port = metrics_port
        self.proc: subprocess.Popen | None = None
        self.reported = False  # its exit was reported

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> None:
        with open(self.log_path, "ab") as log_file:
            # a session of its own: a Ctrl-C reaches the `up` process only, which stops it in order
            self.proc = subprocess.Popen(self.command, stdin=subprocess.DEVNULL, stdout=log_file, stderr=log_file,
                                         start_new_session=True, preexec_fn=die_with_parent)
        self.reported = False

    def terminate(self) -> None:
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
        self.reported = True  # stopped on purpose

    def wait(self, timeout: float) -> None:
        if self.proc is None:
            return
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def status(self) -> str:
        metrics = f", metrics :{self.metrics_port}" if self.metrics_port else ""
        if self.alive():
            state = f"up (pid {self.proc.pid})"
        elif self.proc is None:
            state = "down"
        else:
            state = f"down (exit status {self.proc.returncode})"
        return f"broker {self.node} 127.0.0.1:{self.port}{metrics}: {state}"


def _broker_commands(brokers: int, data: Path, first_port: int, etcd: str,
                     overrides: list[str]) -> list[LocalBroker]:
    """Every broker's `moldau serve`; a metrics.port override is the first broker's, the next ones count up."""
    metrics_base = None
    rest = []
    for item in overrides:
        name, _, value = item.partition("=")
        if name.strip() == "metrics.port" and value.strip().isdigit():
            metrics_base = int(value)
        else:
            rest.append(item)
    out = []
    for node in range(1, brokers + 1):
        port = first_port + node - 1
        command = [sys.executable, "-m", "broker", "serve",
                   "--override", f"node.id={node}",
                   "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}",
                   "--override", f"log.dirs={data / f'broker-{node}'}",
                   "--override", f"etcd.connect={etcd}",
                   "--override", f"default.replication.factor={min(3, brokers)}"]
        metrics_port = None if metrics_base is None else metrics_base + node - 1
        if metrics_port is not None:
            command += ["--override", f"metrics.port={metrics_port}"]
        for item in rest:
            command += ["--override", item]
        out.append(LocalBroker(node, command, data / f"broker-{node}.log", port, metrics_port))
    return out


def _etcd_client_missing() -> bool:
    try:
        import aetcd  # noqa: F401
    except ImportError:
        return True
    return False


def cluster_up(brokers: int, data: Path, first_port: int, overrides: list[str]) -> int:
    if _etcd_client_missing():
        print(f"moldau: a cluster needs the etcd client: {INSTALL_CLUSTER}", file=sys.stderr)
        return 2
    if brokers < 1:
        print(f"moldau: --brokers must be at least 1, got {brokers}", file=sys.stderr)
        return 2
    try:
        lock = lock_directory(data)
    except (LogDirInUse, OSError) as exc:
        print(f"moldau: {data}: another `moldau cluster up` runs on it ({exc})", file=sys.stderr)
        return 1
    control = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    control.bind(control_address(data))
    control.listen(4)
    # SIGTERM as Ctrl-C, from here on: whatever was started by then is stopped in `finally`
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    etcd = LocalEtcd(data / "etcd", die_with_parent=True)
    members: list[LocalBroker] = []
    try:
        etcd.start()
        members = _broker_commands(brokers, data, first_port, etcd.endpoint, overrides)
        for b in members:
            b.start()
        print(f"etcd {etcd.endpoint}; {brokers} brokers, logs in {data}")
        for b in members:
            print(b.status())
        print(f"bootstrap servers: {','.join(f'127.0.0.1:{b.port}' for b in members)}")
        print(f"`moldau cluster stop|start|restart N --data {data}` from another terminal; Ctrl-C stops all",
              flush=True)
        by_node = {b.node: b for b in members}
        while True:
            ready, _, _ = select.select([control], [], [], 0.5)
            for b in members:
                if not b.alive() and not b.reported and b.proc is not None:
                    b.reported = True
                    print(f"moldau: broker {b.node} exited with status {b.proc.returncode} (its log: {b.log_path});"
                          f" the others keep serving; `moldau cluster start {b.node} --data {data}` starts it again",
                          file=sys.stderr, flush=True)
            if ready:
                _answer(control, by_node)
    except (EtcdNotFound, RuntimeError) as exc:
        print(f"moldau: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("stopping", flush=True)
        return 0
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not leave processes behind
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        for b in members:
            b.terminate()
        for b in members:
            b.wait(STOP_S)
        etcd.stop()
        control.close()
        lock.close()


def _answer(control: socket.socket, by_node: dict[int, LocalBroker]) -> None:
    """One command from `moldau cluster stop|start|restart|status`: a line in, lines out."""
    conn, _ = control.accept()
    with conn:
        conn.settimeout(5)
        try:
            action, _, node_text = conn.recv(256).decode().strip().partition(" ")
        except (OSError, UnicodeDecodeError):
            return
        reply = _apply(action, node_text, by_node)
        print(reply, flush=True)
        try:
            conn.sendall(reply.encode() + b"\n")
        except OSError:
            pass


def _apply(action: str, node_text: str, by_node: dict[int, LocalBroker]) -> str:
    if action == "status":
        return "\n".join(b.status() for b in by_node.values())
    b = by_node.get(int(node_text)) if node_text.isdigit() else None
    if b is None:
        return f"error: no broker {node_text or '(none given)'}; there are {', '.join(map(str, by_node))}"
    if action in ("stop", "restart"):
        if b.alive():
            b.terminate()
            b.wait(STOP_S)
        elif action == "stop":
            return f"broker {b.node} is already down"
    if action in ("start", "restart"):
        if b.alive():
            return f"broker {b.node} is already up (pid {b.proc.pid})"
        b.start()
    return b.status()


def cluster_command(action: str, node: int | None, data: Path) -> int:
    """`moldau cluster stop|start|restart N` and `status`: asks the `up` process running on DIR."""
    if action != "status" and node is None:
        print(f"moldau: cluster {action} needs a broker's node.id", file=sys.stderr)
        return 2
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        try:
            conn.connect(control_address(data))
        except OSError:
            print(f"moldau: no `moldau cluster up` runs on {data} (give its --data)", file=sys.stderr)
            return 1
        conn.settimeout(STOP_S * 2 + 10)
        conn.sendall(f"{action} {'' if node is None else node}\n".encode())
        reply = b""
        while chunk := conn.recv(4096):
            reply += chunk
    text = reply.decode().rstrip("\n")
    print(text)
    return 1 if text.startswith("error:") else 0
