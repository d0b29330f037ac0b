"""Workload processes: real clients that write the workload format and keep a journal.

    python -m verify.workloads WORKLOAD --bootstrap HOST:PORT --journal DIR --name NAME [options]

Each one runs until SIGTERM or SIGINT, then finishes what it has in flight,
writes its last journal lines and exits (0, or 1 after a fatal client error).
Fault tests start several of them against a broker they keep breaking, stop
them, and run ``moldau verify`` on the journal directory.

``WORKLOADS`` maps each workload's name to its function; a new kind of
client (a transactional producer, a consume-transform-produce application)
is one more function in it, writing the journal lines of ``verify.workload``.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from collections import Counter
from functools import partial
from pathlib import Path
from typing import Callable

from confluent_kafka import Consumer, KafkaException, Producer

from .workload import Journal, WorkloadRecord, encode_value

CLIENT = {"broker.address.family": "v4", "log.connection.close": False,
          # reconnect quickly to a restarted broker
          "reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 500}


class Stop:
    """Set by SIGTERM or SIGINT: the workload should wind down."""

    def __init__(self) -> None:
        self.requested = False
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._request)

    def _request(self, signum, frame) -> None:
        self.requested = True


def idempotent_producer(args: argparse.Namespace, journal: Journal, stop: Stop) -> int:
    """Records 0, 1, 2, ... at ``--rate`` per second, record i to partition i % ``--partitions``,
    with enable.idempotence; one ack line per acknowledged record."""
    outcomes: Counter = Counter()
    fatal: list[str] = []

    def delivered(seq: int, err, msg) -> None:
        if err is None:
            outcomes["acked"] += 1
            journal.write("ack", producer=args.name, seq=seq, topic=msg.topic(), partition=msg.partition(),
                          offset=msg.offset())
        else:
            outcomes["failed"] += 1

    def on_error(err) -> None:
        if err.fatal():
            fatal.append(str(err))

    producer = Producer({**CLIENT, "bootstrap.servers": args.bootstrap, "enable.idempotence": True,
                         "linger.ms": 5, "batch.num.messages": 100,
                         # outlast every broker restart: nothing may fail for lack of time
                         "message.timeout.ms": 300_000, "error_cb": on_error})
    journal.write("topic", topic=args.topic)
    started = time.monotonic()
    seq = 0
    while not stop.requested and not fatal:
        due = started + seq / args.rate
        wait = due - time.monotonic()
        if wait > 0:
            producer.poll(min(wait, 0.1))
            continue
        value = encode_value(WorkloadRecord(args.name, seq), args.record_size)
        try:
            producer.produce(args.topic, value=value, partition=seq % args.partitions,
                             on_delivery=partial(delivered, seq))
        except BufferError:  # the local queue is full while the broker is down
            producer.poll(0.1)
            continue
        producer.poll(0)
        seq += 1
    deadline = time.monotonic() + args.drain_timeout
    while len(producer) and not fatal and time.monotonic() < deadline:
        producer.poll(0.1)
    journal.write("end", producer=args.name, sent=seq, acked=outcomes["acked"],
                  failed=outcomes["failed"] + len(producer), fatal=fatal)
    return 1 if fatal else 0


def group_consumer(args: argparse.Namespace, journal: Journal, stop: Stop) -> int:
    """A consumer group member that journals each record it processes, then commits past it."""
    consumer = Consumer({**CLIENT, "bootstrap.servers": args.bootstrap, "group.id": args.group,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "isolation.level": "read_committed",
                         "session.timeout.ms": 6000, "heartbeat.interval.ms": 500})
    journal.write("topic", topic=args.topic)
    journal.write("group", group=args.group)
    consumer.subscribe([args.topic])
    try:
        while not stop.requested:
            processed = False
            for message in consumer.consume(num_messages=500, timeout=0.2):
                if message.error() is None:
                    journal.write("processed", group=args.group, topic=message.topic(),
                                  partition=message.partition(), offset=message.offset())
                    processed = True
            if processed:
                try:
                    consumer.commit(asynchronous=False)
                except KafkaException:
                    pass  # the broker is away or the group is rebalancing; a later commit covers these records
    finally:
        consumer.close()
    return 0


WORKLOADS: dict[str, Callable[[argparse.Namespace, Journal, Stop], int]] = {
    "idempotent-producer": idempotent_producer,
    "group-consumer": group_consumer,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m verify.workloads", description=__doc__.split("\n\n")[0])
    parser.add_argument("workload", choices=sorted(WORKLOADS))
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--journal", required=True, type=Path, help="the journal directory")
    parser.add_argument("--name", required=True, help="this process's name: its producer name and journal file")
    parser.add_argument("--topic", required=True)
    parser.add_argument("--partitions", type=int, default=1, help="partitions a producer spreads records over")
    parser.add_argument("--rate", type=float, default=1000.0, help="records a second a producer sends")
    parser.add_argument("--record-size", type=int, default=100, help="bytes of each record value")
    parser.add_argument("--drain-timeout", type=float, default=120.0,
                        help="seconds a stopping producer waits for its last acknowledgements")
    parser.add_argument("--group", default="moldau-verify-group", help="a consumer's group id")
    args = parser.parse_args(argv)
    stop = Stop()
    journal = Journal(args.journal, args.name)
    try:
        return WORKLOADS[args.workload](args, journal, stop)
    finally:
        journal.close()


if __name__ == "__main__":
    sys.exit(main())
