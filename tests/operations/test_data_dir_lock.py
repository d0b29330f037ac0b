"""Two brokers on one log directory lose acknowledged data: the second must refuse to start (Kafka's .lock)."""

from helpers.kafka import create_topic, make_messages, produce_all, read_partitions
from helpers.startup import error_lines, serve_refused

from conftest import free_port


def test_second_broker_on_the_same_log_dir_refuses_to_start(start_broker):
    first = start_broker()
    create_topic(first.bootstrap, "locked", partitions=1)
    msgs = make_messages(200, 1)
    produce_all(first.bootstrap, "locked", msgs)

    refused = serve_refused({"listeners": f"PLAINTEXT://127.0.0.1:{free_port()}", "log.dirs": first.data_dir})
    assert refused.returncode == 1, refused.stderr
    lines = error_lines(refused)
    assert len(lines) == 1 and "in use by another broker" in lines[0] and "Traceback" not in refused.stderr, refused.stderr
    assert first.alive()

    # a crash leaves no stale lock: the kernel drops it with the process
    first.kill()
    second = start_broker({"log.dirs": first.data_dir})
    got, _ = read_partitions(second.bootstrap, "locked", [0])
    assert len(got[0]) == len(msgs)
