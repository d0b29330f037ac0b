"""`moldau cluster up`: an etcd and N brokers on 127.0.0.1, to try a cluster on one machine.

Each broker is its own `moldau serve` process (node.id 1..N, ports from
--port on, data in DIR/broker-<id>); the etcd keeps its data in DIR/etcd.
Ctrl-C stops the brokers (a controlled shutdown each) and then the etcd.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

from .local_etcd import EtcdNotFound, LocalEtcd


def cluster_up(brokers: int, data: Path, first_port: int, overrides: list[str]) -> int:
    data.mkdir(parents=True, exist_ok=True)
    try:
        etcd = LocalEtcd(data / "etcd").start()
    except (EtcdNotFound, RuntimeError) as exc:
        print(f"moldau: {exc}", file=sys.stderr)
        return 1
    procs = []
    try:
        for node in range(1, brokers + 1):
            port = first_port + node - 1
            command = [sys.executable, "-m", "broker", "serve",
                       "--override", f"node.id={node}",
                       "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}",
                       "--override", f"log.dirs={data / f'broker-{node}'}",
                       "--override", f"etcd.connect={etcd.endpoint}",
                       "--override", f"default.replication.factor={min(3, brokers)}"]
            for item in overrides:
                command += ["--override", item]
            log_file = open(data / f"broker-{node}.log", "ab")
            # in sessions of their own: a Ctrl-C reaches this process, which stops them in order
            procs.append(subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log_file, stderr=log_file,
                                          start_new_session=True))
        bootstrap = ",".join(f"127.0.0.1:{first_port + i}" for i in range(brokers))
        print(f"etcd {etcd.endpoint}; {brokers} brokers, logs in {data}")
        print(f"bootstrap servers: {bootstrap}", flush=True)
        signal.signal(signal.SIGTERM, signal.default_int_handler)
        while all(p.poll() is None for p in procs):
            time.sleep(0.5)
        failed = [i + 1 for i, p in enumerate(procs) if p.poll() is not None]
        print(f"moldau: broker(s) {failed} exited; see their logs in {data}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("stopping", flush=True)
        return 0
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not leave processes behind
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
        etcd.stop()
