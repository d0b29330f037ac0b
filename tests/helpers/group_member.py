"""A confluent-kafka group member in a process of its own, so a test can SIGKILL it.

    python group_member.py CONFIG_JSON TOPIC EVENTS_FILE PROCESS_DELAY_S

Subscribes to TOPIC and, for every message, writes ``msg <partition>
<offset>`` to EVENTS_FILE, waits PROCESS_DELAY_S ("processing"), then commits
the offset after it: commit after processing, so every message is processed
at least once. Rebalance callbacks are written as ``assign 0,1``, ``revoke
0,1`` or ``lost 0,1``. The file is line-buffered, so a SIGKILL loses nothing
that was written. SIGTERM closes the consumer cleanly.
"""

from __future__ import annotations

import json
import signal
import sys
import time

from confluent_kafka import Consumer, KafkaException


def main() -> None:
    config, topic, events_path, delay = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3], float(sys.argv[4])
    events = open(events_path, "a", buffering=1)

    def record(kind: str):
        return lambda consumer, partitions: events.write(f"{kind} {','.join(str(p.partition) for p in partitions)}\n")

    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    consumer = Consumer(config)
    consumer.subscribe([topic], on_assign=record("assign"), on_revoke=record("revoke"), on_lost=record("lost"))
    while not stopping:
        m = consumer.poll(0.2)
        if m is None or m.error() is not None:
            continue
        events.write(f"msg {m.partition()} {m.offset()}\n")
        time.sleep(delay)
        try:
            consumer.commit(message=m, asynchronous=False)
        except KafkaException as exc:  # e.g. during a rebalance: the next owner processes it again
            events.write(f"commit-failed {m.partition()} {m.offset()} {exc.args[0].name()}\n")
    consumer.close()


if __name__ == "__main__":
    main()
