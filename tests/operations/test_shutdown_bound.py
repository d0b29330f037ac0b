"""A SIGTERM ends the broker even when a task goes on after being cancelled: the shutdown gives up on it
within its bound, names it in the log, and still flushes and closes the logs."""

import re

from helpers.kafka import create_topic, make_messages, produce_all, read_partitions


def test_sigterm_ends_the_broker_past_a_task_that_ignores_cancellation(start_broker):
    b = start_broker(autostart=False)
    b.env = {"MOLDAU_FAULT_IGNORE_CANCELLATION": "1"}
    b.start()
    create_topic(b.bootstrap, "kept", partitions=2)
    produce_all(b.bootstrap, "kept", make_messages(200, 2))
    since = b.log_offset()
    assert b.stop() == 0  # AssertionError if still running 20 s after the SIGTERM
    log = b.log_since(since)
    assert "fault injection (MOLDAU_FAULT_IGNORE_CANCELLATION): cancelled, going on" in log, log
    assert re.search(r"moldau.shutdown: a task did not end within [\d.]+s of its cancellation, left behind: "
                     r"_ignore_cancellation at \S+faults\.py:\d+", log), log
    assert "stopped; logs flushed and closed" in log, log
    assert (b.data_dir / ".kafka_cleanshutdown").exists()

    b.env = {}
    b.start()
    assert "not shut down cleanly" not in b.log_since_start()
    got, marks = read_partitions(b.bootstrap, "kept", [0, 1])
    assert sum(len(messages) for messages in got.values()) == 200
