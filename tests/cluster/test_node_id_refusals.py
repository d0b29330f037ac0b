"""Refuse, don't hang (issue 28): a node.id a live broker holds stops the second broker with one line
naming the first one's address; an earlier run's session is waited for with a countdown, and a signal
ends that wait at once; broker.id is read as node.id."""

import subprocess
import sys
import time

import pytest
from conftest import REPO_ROOT, BrokerProcess, free_port
from helpers.cluster import start_cluster  # noqa: F401 (fixture)


def serve(workdir, cluster, node_id: int, *extra: str) -> subprocess.Popen:
    port = free_port()
    command = [sys.executable, "-m", "broker", "serve", "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}",
               "--override", f"log.dirs={workdir}", "--override", f"etcd.connect={cluster.etcd.endpoint}",
               "--override", "etcd.session.timeout.ms=4000", "--override", f"node.id={node_id}", *extra]
    return subprocess.Popen(command, cwd=REPO_ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


@pytest.mark.timeout(120)
def test_a_live_duplicate_node_id_is_refused_with_its_address(start_cluster, tmp_path):
    cluster = start_cluster(2)
    second = serve(tmp_path / "dup", cluster, 2)
    try:
        _, err = second.communicate(timeout=60)
    finally:
        second.kill()
    assert second.returncode == 1
    first = cluster.brokers[2]
    line = [ln for ln in err.splitlines() if ln.startswith("moldau:")]
    assert line == [f"moldau: node.id 2 is in use by a live broker at 127.0.0.1:{first.port} (its etcd session "
                    f"is being renewed); give this broker another node.id"], err
    assert "Traceback" not in err
    assert first.alive() and cluster.registrations().keys() == {1, 2}


@pytest.mark.timeout(120)
def test_an_earlier_runs_session_is_counted_down_and_a_signal_ends_the_wait(start_cluster, tmp_path):
    cluster = start_cluster(1, etcd_session_timeout_ms=30000)
    crashed = cluster.brokers[1]
    crashed.kill()  # its lease lives on for 30 s
    waiting = serve(tmp_path / "again", cluster, 1)
    try:
        deadline = time.monotonic() + 40
        lines = []
        while time.monotonic() < deadline:
            line = waiting.stderr.readline()
            lines.append(line)
            if "still registered" in line:
                break
        assert f"node.id 1 is still registered by an earlier run (127.0.0.1:{crashed.port}); its session expires in" \
            in lines[-1], "".join(lines)
        started = time.monotonic()
        waiting.terminate()
        _, err = waiting.communicate(timeout=30)
        assert time.monotonic() - started < 10, err  # not the watchdog's 120 s
        assert waiting.returncode == 0 and "Traceback" not in err, err
    finally:
        waiting.kill()


@pytest.mark.timeout(120)
def test_broker_id_is_node_id(start_cluster, tmp_path):
    cluster = start_cluster(1)
    b = BrokerProcess(tmp_path / "by-broker-id", {"etcd.connect": cluster.etcd.endpoint, "broker.id": 7,
                                                    "etcd.session.timeout.ms": 4000})
    try:
        b.start()
        assert "broker.id is a Kafka broker config that Moldau does not support" not in b.log_since_start()
        cluster.wait_until(lambda: 7 in cluster.registrations(), 30, "broker 7 registered")
    finally:
        b.cleanup()
    conflicting = serve(tmp_path / "conflict", cluster, 3, "--override", "broker.id=4")
    _, err = conflicting.communicate(timeout=60)
    assert conflicting.returncode == 2
    assert err.strip().splitlines()[-1] == ("moldau: broker.id 4 and node.id 3 differ: set node.id to the same "
                                            "value as broker.id, or leave one out")


def test_a_lease_counts_as_renewed_only_when_its_ttl_stays_up_through_two_windows():
    from broker.cluster.etcd_session import renewed_throughout

    def samples(ttls):  # one every 0.5 s
        return [(i * 0.5, ttl) for i, ttl in enumerate(ttls)]

    kept_alive_every_second = samples([8] * 13)  # a 9 s lease renewed each second: its whole-second TTL level
    assert renewed_throughout(kept_alive_every_second, 3.0)
    expiring = samples([8, 8, 7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2])
    assert not renewed_throughout(expiring, 3.0)
    renewed_once = samples([8, 8, 7, 7, 6, 6, 8, 8, 7, 7, 6, 6, 5])  # a new etcd leader renewed it once
    assert not renewed_throughout(renewed_once, 3.0)
    assert not renewed_throughout(kept_alive_every_second[:6], 3.0)  # not watched long enough yet
