"""A configuration Kafka would refuse stops the broker with one line and exit code 2, before any work."""

import socket

import pytest
from helpers.kafka import create_topic
from helpers.startup import error_lines, serve_refused

from conftest import free_port


@pytest.mark.parametrize(
    "overrides, says",
    [
        ({"listeners": "PLAINTEXT://127.0.0.1:99999"}, "port 99999 is not in [0, 65535]"),
        ({"listeners": "127.0.0.1:{port}"}, "has no listener name"),
        ({"listeners": "PLAINTEXT://127.0.0.1"}, "has no port"),
        ({"num.partitions": "0"}, "num.partitions: must be at least 1"),
        ({"num.partitions": "-3"}, "num.partitions: must be at least 1"),
        ({"log.segment.bytes": "13"}, "log.segment.bytes: must be in [14,"),
        ({"log.segment.bytes": "lots"}, "log.segment.bytes: invalid value 'lots'"),
        ({"listeners": "PLAINTEXT://no-such-host.invalid:{port}"}, "cannot resolve host 'no-such-host.invalid'"),
        ({"log.dirs": "{data},{data}-2"}, "exactly one directory"),
        ({"inter.broker.listener.name": "INTERNAL"}, "inter.broker.listener.name: INTERNAL is not one of the listeners"),
        # the setting the user wrote, not the one it is turned into (retention.ms) or an errno
        ({"log.retention.hours": "-5"}, "log.retention.hours: must be at least -1, got -5"),
        ({"log.cleaner.min.cleanable.ratio": "2"}, "log.cleaner.min.cleanable.ratio: must be in [0, 1]"),
        ({"log.dirs": "{file}"}, "log.dirs: {file} is a file, not a directory"),
        ({"log.dirs": "", "log.dir": "{file}/data"}, "log.dir: {file}/data cannot be created: a part of its path is a file"),
        # KIP-848's defaults within their bounds, as Kafka's GroupCoordinatorConfig requires
        ({"group.consumer.heartbeat.interval.ms": "1000"}, "group.consumer.heartbeat.interval.ms must be in "
         "[group.consumer.min.heartbeat.interval.ms, group.consumer.max.heartbeat.interval.ms] = [5000, 15000]"),
        ({"group.consumer.max.session.timeout.ms": "40000"},
         "group.consumer.max.session.timeout.ms must be greater than or equal to group.consumer.min.session.timeout.ms"),
    ],
)
def test_bad_config_is_one_line_and_exit_code_2(tmp_path, overrides, says):
    values = {"listeners": "PLAINTEXT://127.0.0.1:{port}", "log.dirs": "{data}", **overrides}
    port = free_port()
    a_file = tmp_path / "a-file"
    a_file.write_text("not a directory")
    result = serve_refused({k: v.format(port=port, data=tmp_path / "data", file=a_file) for k, v in values.items()})
    assert result.returncode == 2, result.stderr
    lines = error_lines(result)
    says = says.format(file=a_file)
    assert len(lines) == 1 and says in lines[0] and "Traceback" not in result.stderr, result.stderr
    assert not (tmp_path / "data" / "__consumer_offsets-0").exists()


def test_port_in_use_is_refused_before_the_logs_load(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = serve_refused({"listeners": f"PLAINTEXT://127.0.0.1:{port}", "log.dirs": tmp_path / "data"})
    assert result.returncode == 2, result.stderr
    lines = error_lines(result)
    assert len(lines) == 1 and f"127.0.0.1:{port}: cannot bind (Address already in use)" in lines[0], result.stderr
    assert "Traceback" not in result.stderr
    # bound before the internal topics are created: nothing was written
    assert not any(p.is_dir() for p in (tmp_path / "data").iterdir())


def test_serve_help_shows_defaults_as_written_in_server_properties():
    import subprocess
    import sys

    from helpers.startup import REPO_ROOT

    out = subprocess.run([sys.executable, "-m", "broker", "serve", "--help"], cwd=REPO_ROOT, capture_output=True,
                         text=True, timeout=60).stdout
    assert "e+308" not in out and "None" not in out and "(default: True)" not in out
    assert "log.cleaner.io.max.bytes.per.second" in out and "(default: no limit)" in out
    assert "metrics.port" in out and "(default: not set)" in out


def test_log_dir_singular_is_honoured(start_broker, tmp_path):
    b = start_broker({"log.dirs": "", "log.dir": tmp_path / "singular"})
    create_topic(b.bootstrap, "here", partitions=1)
    assert (tmp_path / "singular" / "here-0").is_dir()
    assert not (b.data_dir / "here-0").exists()


def test_unsupported_kafka_names_and_typos_are_told_apart(start_broker):
    b = start_broker({"log.preallocate": "true", "num.partitons": 3, "zzz.frobnicate": 1})
    log = b.log_since_start()
    assert "log.preallocate is a Kafka broker config that Moldau does not support; ignored" in log
    assert "unknown config num.partitons; did you mean num.partitions? (ignored)" in log
    assert "unknown config zzz.frobnicate (ignored)" in log


def test_a_missing_etcd_client_is_one_line_with_the_install_command(tmp_path):
    """Without the [cluster] extra (here: an aetcd that cannot be imported, first on the path), `serve` with
    etcd.connect and `cluster up` each say what to install, before starting anything."""
    import os
    import subprocess
    import sys

    from helpers.startup import REPO_ROOT

    shadow = tmp_path / "no-aetcd" / "aetcd"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'aetcd'\", name='aetcd')\n")
    env = {**os.environ, "PYTHONPATH": str(shadow.parent)}
    port = free_port()
    commands = [
        ["serve", "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}", "--override", f"log.dirs={tmp_path / 's'}",
         "--override", "etcd.connect=127.0.0.1:2379"],
        ["cluster", "up", "--brokers", "2", "--data", str(tmp_path / "c"), "--port", str(port)],
    ]
    for args in commands:
        result = subprocess.run([sys.executable, "-m", "broker", *args], cwd=REPO_ROOT, env=env, capture_output=True,
                                text=True, timeout=60, stdin=subprocess.DEVNULL)
        assert result.returncode == 2, result
        lines = error_lines(result)
        assert len(lines) == 1 and "pip install 'moldau[cluster]'" in lines[0], result.stderr
        assert not (tmp_path / "c" / "etcd").exists()


def test_a_listening_metrics_socket_holds_its_port():
    """metrics.port listens as soon as it is bound: two brokers starting at once on one port (SO_REUSEADDR
    lets both bind while neither listens) left the later one with a closed socket and a traceback."""
    from broker.config.broker_config import ConfigError
    from broker.network.server import bind_socket

    port = free_port()
    first = bind_socket("127.0.0.1", port, "metrics.port", listen=True)
    try:
        with pytest.raises(ConfigError, match=r"metrics.port: cannot bind \(Address already in use\)"):
            bind_socket("127.0.0.1", port, "metrics.port", listen=True)
    finally:
        first.close()
