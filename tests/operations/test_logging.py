"""Log levels, log4j-style (--log-level, log.level), and what is logged at INFO."""

import re
import socket

from confluent_kafka import Producer
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, NewPartitions, NewTopic
from helpers.groups import wait_until
from helpers.kafka import COMMON, admin, consumer, watermarks
from helpers.startup import error_lines, serve_refused


def committed_transactions(b, n: int, partitions: int = 1) -> None:
    """``n`` committed transactions, waited for until their markers are written: a commit returns once the
    coordinator has decided, and a shutdown right after may come before the last one is complete."""
    p = Producer({**COMMON, "bootstrap.servers": b.bootstrap, "transactional.id": "logged-txn"})
    p.init_transactions(30)
    for i in range(n):
        p.begin_transaction()
        p.produce("logged", b"%d" % i)
        p.commit_transaction(30)
    committed, _ = consumer(b.bootstrap, isolation_level="read_committed")
    uncommitted, _ = consumer(b.bootstrap, isolation_level="read_uncommitted")
    try:  # the last stable offset reaches the log end once every marker is in
        wait_until(lambda: all(watermarks(committed, "logged", i)[1] == watermarks(uncommitted, "logged", i)[1]
                               for i in range(partitions)), 30, "the transactions' markers", interval=0.05)
    finally:
        committed.close()
        uncommitted.close()


def test_topic_changes_are_logged_at_info_and_transactions_summarised(start_broker):
    b = start_broker()
    a = admin(b.bootstrap)
    a.create_topics([NewTopic("logged", 1, 1, config={"retention.ms": "60000"})])["logged"].result(30)
    a.create_partitions([NewPartitions("logged", 3)])["logged"].result(30)
    for done in a.incremental_alter_configs([ConfigResource("topic", "logged", incremental_configs=[
            ConfigEntry("retention.ms", "120000", incremental_operation=AlterConfigOpType.SET)])]).values():
        done.result(30)
    b.wait_for_log(r"topic logged configs changed from \{'retention.ms': '60000'\} to \{'retention.ms': '120000'\}")
    committed_transactions(b, 3, partitions=3)
    a.delete_topics(["logged"])["logged"].result(30)
    b.stop()
    log = b.log_since_start()
    assert re.search(r"INFO moldau.create_topics: created topic logged: 1 partitions, configs \{'retention.ms'", log)
    assert "INFO moldau.create_partitions: topic logged grown from 1 to 3 partitions" in log
    assert "INFO moldau.delete_topics: deleted topic logged (3 partitions)" in log
    # per transaction at DEBUG only; the summary at INFO (every minute, and at shutdown)
    assert "committed <transaction logged-txn" not in log
    assert "INFO moldau.transaction: transactions completed since the last summary: 3 committed, 0 aborted" in log


def test_per_logger_levels(start_broker):
    b = start_broker({"log.level": "INFO,moldau.transaction=DEBUG,moldau.broker=WARN"})
    committed_transactions(b, 2)
    b.wait_for_log(r"DEBUG moldau.transaction: committed <transaction logged-txn")
    log = b.log_since_start()
    assert "listening on" in log and "auto-created topic" not in log


def test_log_level_option_overrides_the_config(tmp_path):
    with socket.socket() as taken:  # the broker logs its config warnings, then stops: the port is in use
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        config = {"listeners": f"PLAINTEXT://127.0.0.1:{taken.getsockname()[1]}", "log.dirs": tmp_path,
                  "log.preallocate": "true", "log.level": "DEBUG"}
        warned = serve_refused(config)
        quiet = serve_refused(config, "--log-level", "ERROR")
    assert warned.returncode == quiet.returncode == 2
    assert "log.preallocate is a Kafka broker config" in warned.stderr
    assert "log.preallocate" not in quiet.stderr and "cannot bind" in quiet.stderr

    refused = serve_refused({"log.level": "INFO,moldau=LOUD", "log.dirs": tmp_path})
    assert refused.returncode == 2 and "log.level: 'LOUD' is not a level" in error_lines(refused)[0]
    refused = serve_refused({"log.dirs": tmp_path}, "--log-level", "NOISY")
    assert refused.returncode == 2 and "--log-level: 'NOISY' is not a level" in refused.stderr


def test_log_file_is_reopened_after_logrotate_moves_it(tmp_path):
    """log.file: the daemon's log in a file instead of stderr, reopened once logrotate has moved it."""
    import subprocess
    import time

    from conftest import REPO_ROOT, BrokerProcess

    log_file = tmp_path / "moldau.log"
    b = BrokerProcess(tmp_path / "broker", {"log.file": log_file})
    proc = subprocess.Popen(b.command(), cwd=REPO_ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while not (log_file.exists() and f"listening on PLAINTEXT://127.0.0.1:{b.port}" in log_file.read_text()):
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
            time.sleep(0.1)
        log_file.rename(tmp_path / "moldau.log.1")  # what logrotate does
        client = admin(b.bootstrap)
        client.create_topics([NewTopic("rotated", 1, 1)])["rotated"].result(30)
        deadline = time.monotonic() + 20
        while not (log_file.exists() and "rotated" in log_file.read_text()):
            assert time.monotonic() < deadline, "the moved log file was not reopened"
            time.sleep(0.1)
        proc.terminate()
        _, err = proc.communicate(timeout=30)
        assert err == ""  # it all went to the file
        assert "stopped; logs flushed and closed" in log_file.read_text()
    finally:
        proc.kill()


def test_version():
    import subprocess
    import sys

    from broker import __version__
    from conftest import REPO_ROOT

    out = subprocess.run([sys.executable, "-m", "broker", "--version"], cwd=REPO_ROOT, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0 and out.stdout == f"moldau {__version__}\n"
    changelog = (REPO_ROOT / "CHANGELOG.md").read_text()
    assert f"## {__version__}" in changelog


def test_systemd_unit_runs_the_broker_as_systemd_would_stop_it():
    """The example unit: `moldau serve` with a properties file, stopped by SIGTERM with more time than the
    broker's own bound, not restarted after a refused configuration (exit status 2)."""
    import configparser
    import shlex

    from broker import shutdown
    from conftest import REPO_ROOT

    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.optionxform = str
    unit.read(REPO_ROOT / "docs" / "systemd" / "moldau.service")
    service = unit["Service"]
    command = shlex.split(service["ExecStart"])
    assert command[0].endswith("/moldau") and command[1] == "serve" and command[2].endswith("server.properties")
    assert service["KillSignal"] == "SIGTERM" and int(service["TimeoutStopSec"]) > shutdown.WATCHDOG_S
    assert service["RestartPreventExitStatus"] == "2"
