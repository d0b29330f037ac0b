"""After an unclean shutdown the broker says so, how much it checks and how long recovery took."""

import re

from helpers.kafka import create_topic, make_messages, produce_all


def test_recovery_after_kill_is_announced_and_timed(start_broker):
    b = start_broker()
    create_topic(b.bootstrap, "recovered", partitions=2)
    produce_all(b.bootstrap, "recovered", make_messages(2000, 2))
    b.kill()
    b.start()
    log = b.log_since_start()
    announced = re.search(r"was not shut down cleanly \(no \.kafka_cleanshutdown\): recovering (\d+) partitions, "
                          r"checking ([\d.]+) MiB from their recovery points", log)
    assert announced, log
    assert int(announced.group(1)) >= 102  # the two of the topic and the internal topics'
    assert float(announced.group(2)) > 0
    assert re.search(rf"recovery done in [\d.]+ s: {announced.group(1)} partitions, {announced.group(2)} MiB checked",
                     log), log

    b.stop()
    b.start()
    assert "not shut down cleanly" not in b.log_since_start()
    assert "recovery done" not in b.log_since_start()
