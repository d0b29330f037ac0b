"""console.port on `moldau serve`: the console runs as the broker's child, is started again when it dies,
never takes the broker with it, and ends with the broker; a port it cannot bind stops the broker at start
with one line."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import psutil
import pytest

from conftest import REPO_ROOT, free_port
from helpers.kafka import admin

pytestmark = pytest.mark.timeout(120)


def console_children(broker) -> list[psutil.Process]:
    return [c for c in psutil.Process(broker.pid).children() if "console" in c.cmdline()]


def front_page(port: int, timeout: float = 30) -> str:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10) as answer:
                return answer.read().decode()
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def test_console_port_serves_the_console_from_a_child_the_broker_restarts(start_broker):
    port = free_port()
    broker = start_broker(console_port=port)
    assert broker.bootstrap in front_page(port)
    (child,) = console_children(broker)
    child.send_signal(signal.SIGKILL)
    child.wait(10)
    # the broker serves on, and the console comes back on the same port
    assert broker.port in {p.port for p in admin(broker.bootstrap).list_topics(timeout=10).brokers.values()}
    assert broker.bootstrap in front_page(port)
    broker.wait_for_log("the web console exited with code -9")
    (again,) = console_children(broker)
    assert again.pid != child.pid
    assert broker.stop() == 0
    again.wait(10)  # ended with the broker
    # a broker killed outright: its console notices and stops by itself
    broker.start()
    front_page(port)
    (orphan,) = console_children(broker)
    os.kill(broker.pid, signal.SIGKILL)
    broker.proc.wait(10)
    orphan.wait(15)


def test_console_port_in_use_stops_the_broker_with_one_line(tmp_path):
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "broker", "serve", "--override", f"listeners=PLAINTEXT://127.0.0.1:{free_port()}",
             "--override", f"log.dirs={tmp_path}", "--override", f"console.port={port}"],
            cwd=str(REPO_ROOT), capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == "moldau: console.port: cannot bind (Address already in use)"
    assert "Traceback" not in done.stderr
