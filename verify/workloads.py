"""Workload processes: real clients that write the workload format and keep a journal.

    python -m verify.workloads WORKLOAD --bootstrap HOST:PORT --journal DIR --name NAME [options]

Each one runs until SIGTERM or SIGINT, then finishes what it has in flight,
writes its last journal lines and exits (0, or 1 after a fatal client error).
Fault tests start several of them against a broker they keep breaking, stop
them, and run ``moldau verify`` on the journal directory.

``WORKLOADS`` maps each workload's name to its function; a new kind of
client is one more function in it, writing the journal lines of
``verify.workload``.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import sys
import threading
import time
from collections import Counter
from functools import partial
from pathlib import Path
from typing import Callable

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition

from .workload import ABORT, COMMIT, Journal, WorkloadRecord, copy_producer, decode_value, encode_value

CLIENT = {"broker.address.family": "v4", "log.connection.close": False,
          # reconnect quickly to a restarted broker
          "reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 500,
          # Re-bootstrapping while the only broker is down replaces its handle, and a transactional
          # producer can then wait forever on the replaced one as group coordinator (librdkafka #5511).
          "metadata.recovery.strategy": "none"}
# a transactional producer's records may not outlive its transaction
TRANSACTIONAL = {"transaction.timeout.ms": 30_000, "message.timeout.ms": 30_000, "linger.ms": 5}
CALL_TIMEOUT = 30  # seconds for each transactional API call
HUNG_AFTER = 2 * CALL_TIMEOUT  # a call retried on timeouts this long is stuck (the coordinators moved long ago)


class Stop:
    """Whether the workload should wind down: after SIGTERM or SIGINT, or once the process that
    started it is gone (a test harness that died must not leave workloads running)."""

    def __init__(self) -> None:
        self._parent = os.getppid()
        self._signalled = False
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._request)

    def _request(self, signum, frame) -> None:
        self._signalled = True

    @property
    def requested(self) -> bool:
        return self._signalled or os.getppid() != self._parent


def _produce(producer: Producer, topic: str, value: bytes, partition: int, **kwargs) -> None:
    """Queue one record, serving delivery reports while the local queue is full (the broker is away)."""
    while True:
        try:
            producer.produce(topic, value=value, partition=partition, **kwargs)
            return
        except BufferError:
            producer.poll(0.1)


def _pace(producer: Producer, started: float, sent: int, rate: float) -> None:
    """Serve callbacks until record number ``sent`` is due at ``rate`` records a second."""
    while (wait := started + sent / rate - time.monotonic()) > 0:
        producer.poll(min(wait, 0.1))


# retriable in Kafka, but not always flagged so by librdkafka: a timed-out committed() (the broker is
# restarting or hung), a committed() that reached a broker the group's coordinator just left
RETRIED = {KafkaError._TIMED_OUT, KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_NOT_AVAILABLE,
           KafkaError.COORDINATOR_LOAD_IN_PROGRESS}


def _retry(call: Callable, *args):
    """Call a client API until it stops failing with a retriable error or a timeout."""
    while True:
        try:
            return call(*args)
        except KafkaException as exc:
            error = exc.args[0]
            if error.txn_requires_abort() or error.fatal() or not (error.retriable() or error.code() in RETRIED):
                raise


def _end_transaction(producer: Producer, outcome: str) -> str:
    """Commit or abort the open transaction; returns which it was (a failed commit may have to abort)."""
    while True:
        try:
            _retry(producer.commit_transaction if outcome == COMMIT else producer.abort_transaction, CALL_TIMEOUT)
            return outcome
        except KafkaException as exc:
            if outcome != COMMIT or not exc.args[0].txn_requires_abort():
                raise
            outcome = ABORT


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
            print(f"{args.name}: {err}", file=sys.stderr)

    producer = Producer({**CLIENT, "bootstrap.servers": args.bootstrap, "enable.idempotence": True,
                         "linger.ms": 5, "batch.num.messages": 100,
                         # outlast every broker restart: nothing may fail for lack of time
                         "message.timeout.ms": 300_000, "error_cb": on_error})
    journal.write("topic", topic=args.topic)
    started = time.monotonic()
    seq = 0
    while not stop.requested and not fatal:
        _pace(producer, started, seq, args.rate)
        value = encode_value(WorkloadRecord(args.name, seq), args.record_size)
        _produce(producer, args.topic, value, seq % args.partitions, on_delivery=partial(delivered, seq))
        seq += 1
    deadline = time.monotonic() + args.drain_timeout
    while len(producer) and not fatal and time.monotonic() < deadline:
        producer.poll(0.1)
    journal.write("end", producer=args.name, sent=seq, acked=outcomes["acked"],
                  failed=outcomes["failed"] + len(producer), fatal=fatal)
    return 1 if fatal else 0


class _Commits:
    """A group member's asynchronous offset commits, one under way at a time.

    A commit is answered once it is replicated (acks=all on __consumer_offsets): seconds while followers
    lag behind brokers that are killed or paused, more while librdkafka looks for the next coordinator.
    Committing synchronously, the member processed nothing meanwhile (it went on heartbeating) and the
    group fell behind. Asynchronous, the member goes on processing while a commit is under way. One at a
    time, so a commit answered after a later one cannot move the group's offsets back; a commit
    unanswered for CALL_TIMEOUT seconds is given up and the positions sent again."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.committed: dict[tuple[str, int], int] = {}  # offsets the coordinator acknowledged
        self.sent_at: float | None = None  # when the commit under way was sent

    def on_commit(self, err, partitions: list[TopicPartition]) -> None:
        """librdkafka's commit callback, served by the consumer's consume calls."""
        self.sent_at = None
        if err is not None:
            print(f"{self.name}: commit failed: {err}", file=sys.stderr)
        # a late answer of a commit given up can be older than the last one: the positions are sent again
        self.committed.update(((tp.topic, tp.partition), tp.offset) for tp in partitions if tp.error is None)

    def pending(self) -> bool:
        return self.sent_at is not None and time.monotonic() - self.sent_at < CALL_TIMEOUT

    def send(self, consumer: Consumer) -> bool:
        """Commit the positions that moved, unless a commit is under way; whether there was anything to commit.

        The positions, not the last records' offsets: a position also moves past transaction markers,
        which are never handed to the application."""
        moved = [tp for tp in consumer.position(consumer.assignment())
                 if tp.offset >= 0 and self.committed.get((tp.topic, tp.partition)) != tp.offset]
        if moved and not self.pending():
            try:
                consumer.commit(offsets=moved, asynchronous=True)
                self.sent_at = time.monotonic()
            except KafkaException as exc:  # e.g. no assignment any more; the next round sends again
                print(f"{self.name}: commit not sent: {exc}", file=sys.stderr)
        return bool(moved)

    def finish(self, consumer: Consumer, process: Callable[[list], None]) -> None:
        """Commit what was processed before leaving, for at most CALL_TIMEOUT seconds. The partitions are
        paused so that serving the commit's answer fetches nothing more (anything already fetched is
        processed, as its position may be committed)."""
        consumer.pause(consumer.assignment())
        deadline = time.monotonic() + CALL_TIMEOUT
        while self.send(consumer) or self.pending():
            if time.monotonic() > deadline:
                print(f"{self.name}: last commit unanswered after {CALL_TIMEOUT} s", file=sys.stderr)
                return
            process(consumer.consume(num_messages=1, timeout=0.1))  # serves the commit callback


def group_consumer(args: argparse.Namespace, journal: Journal, stop: Stop) -> int:
    """A consumer group member that journals each record it processes, then commits past it."""
    commits = _Commits(args.name)
    consumer = Consumer({**CLIENT, "bootstrap.servers": args.bootstrap, "group.id": args.group,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "isolation.level": "read_committed",
                         "session.timeout.ms": 6000, "heartbeat.interval.ms": 500,
                         "on_commit": commits.on_commit})
    journal.write("topic", topic=args.topic)
    journal.write("group", group=args.group)
    consumer.subscribe([args.topic])

    def process(messages: list) -> None:
        for message in messages:
            if message.error() is None:
                journal.write("processed", group=args.group, topic=message.topic(),
                              partition=message.partition(), offset=message.offset())

    try:
        while not stop.requested:
            process(consumer.consume(num_messages=500, timeout=0.2))
            commits.send(consumer)
        commits.finish(consumer, process)
    finally:
        consumer.close()
    return 0


def transactional_producer(args: argparse.Namespace, journal: Journal, stop: Stop) -> int:
    """Transactions of ``--txn-size`` records spread over ``--partitions`` partitions at about ``--rate``
    records a second; every ``--abort-every``th one is aborted on purpose. One txn line per transaction."""
    producer = Producer({**CLIENT, **TRANSACTIONAL, "bootstrap.servers": args.bootstrap,
                         "transactional.id": args.name})
    journal.write("topic", topic=args.topic)
    started = time.monotonic()
    sent = ended = 0
    fatal = []
    try:
        _retry(producer.init_transactions, CALL_TIMEOUT)
        number = 0
        while not stop.requested:
            txn = f"{args.name}:{number}"
            producer.begin_transaction()
            for _ in range(args.txn_size):
                _pace(producer, started, sent, args.rate)
                record = WorkloadRecord(args.name, sent, txn, args.txn_size)
                _produce(producer, args.topic, encode_value(record, args.record_size), sent % args.partitions)
                sent += 1
            wanted = ABORT if args.abort_every and number % args.abort_every == args.abort_every - 1 else COMMIT
            if wanted == ABORT:
                producer.flush(CALL_TIMEOUT)  # written first, so read_committed readers have something to skip
            journal.write("txn", txn=txn, outcome=_end_transaction(producer, wanted), size=args.txn_size)
            ended += args.txn_size
            number += 1
    except KafkaException as exc:  # not retriable, not abortable: the producer cannot go on
        fatal.append(str(exc))
        print(f"{args.name}: {exc}", file=sys.stderr)
    journal.write("end", producer=args.name, sent=sent, acked=ended, failed=sent - ended, fatal=fatal)
    return 1 if fatal else 0


def _positions(consumer: Consumer) -> list[TopicPartition]:
    return [tp for tp in consumer.position(consumer.assignment()) if tp.offset >= 0]


class ProducerHung(Exception):
    """send_offsets_to_transaction did not return: the producer is stuck for good (see _send_offsets)."""


def _send_offsets(producer: Producer, positions: list[TopicPartition], group: object) -> None:
    """send_offsets_to_transaction, in a thread of its own: librdkafka (#5511, #5456) can wait forever,
    past its timeout, for a group coordinator whose broker handle it dropped when the broker left the
    metadata (killed or paused); raises ProducerHung then."""
    outcome: list = []

    def send() -> None:
        try:
            outcome.append(_retry(producer.send_offsets_to_transaction, positions, group, CALL_TIMEOUT))
        except KafkaException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    thread.join(HUNG_AFTER)
    if not outcome:
        raise ProducerHung(f"send_offsets_to_transaction did not return in {HUNG_AFTER} s")
    if isinstance(outcome[0], KafkaException):
        raise outcome[0]


def _commit_consumed(producer: Producer, consumer: Consumer, positions: list[TopicPartition]) -> str:
    """Add ``positions`` (the consumer's) to the open transaction and commit it; returns commit or abort."""
    try:
        _send_offsets(producer, positions, consumer.consumer_group_metadata())
    except KafkaException as exc:
        if not exc.args[0].txn_requires_abort():  # e.g. a rebalance took the partitions away
            raise
        return _end_transaction(producer, ABORT)
    return _end_transaction(producer, COMMIT)


def _committed(consumer: Consumer) -> list[TopicPartition]:
    """The group's committed offsets of the assignment; a partition answered with an error (the
    broker was going down) is asked again rather than taken for one without a committed offset."""
    while True:
        answer = _retry(consumer.committed, consumer.assignment(), CALL_TIMEOUT)
        if not any(tp.error for tp in answer):
            return answer
        time.sleep(0.1)


def _rewind(consumer: Consumer, journal: Journal) -> None:
    """Go back to the group's committed offsets: the input of an aborted transaction, or of a
    consume call the assignment changed in, is read and copied again."""
    committed = _committed(consumer)
    journal.write("rewind", to={tp.partition: tp.offset for tp in committed})
    for tp in committed:
        try:
            consumer.seek(TopicPartition(tp.topic, tp.partition, tp.offset if tp.offset >= 0 else OFFSET_BEGINNING))
        except KafkaException:
            pass  # a partition just assigned and not fetching yet starts at the committed offset anyway


def copy_app(args: argparse.Namespace, journal: Journal, stop: Stop) -> int:
    """Consume-transform-produce, exactly once: each record of ``--topic`` is copied to the same partition
    of ``--output`` in the transaction that also commits group ``--group``'s offsets past it."""
    consumer = Consumer({**CLIENT, "bootstrap.servers": args.bootstrap, "group.id": args.group,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "isolation.level": "read_committed", "session.timeout.ms": 6000,
                         "heartbeat.interval.ms": 500})
    config = {**CLIENT, **TRANSACTIONAL, "bootstrap.servers": args.bootstrap, "transactional.id": args.name}
    producer = Producer(config)
    hung: list[Producer] = []  # kept: destroying a producer stuck in a call would block too
    for topic in (args.topic, args.output):
        journal.write("topic", topic=topic)
    journal.write("copy", group=args.group, input=args.topic, output=args.output)
    reassignments = [0]  # assignments given, revoked or lost so far: counted by the rebalance callbacks

    def reassigned(consumer: Consumer, partitions: list[TopicPartition]) -> None:
        reassignments[0] += 1

    def commit(positions: list[TopicPartition]) -> str:
        """_commit_consumed; a hung producer is replaced by a new one of the same transactional.id, whose
        init_transactions fences it and aborts the transaction it left open."""
        nonlocal producer
        try:
            return _commit_consumed(producer, consumer, positions)
        except ProducerHung as exc:
            print(f"{args.name}: {exc}: going on with a new producer", file=sys.stderr)
            hung.append(producer)
            producer = Producer(config)
            _retry(producer.init_transactions, CALL_TIMEOUT)
            return ABORT

    consumer.subscribe([args.topic], on_assign=reassigned, on_revoke=reassigned, on_lost=reassigned)
    fatal = []
    try:
        _retry(producer.init_transactions, CALL_TIMEOUT)
        incarnation = secrets.token_hex(4)  # a restarted app (same transactional.id) names its transactions anew
        number = 0
        committed: dict[int, int] = {}  # partition -> position this app last committed
        while not stop.requested:
            before = reassignments[0]
            messages = [m for m in consumer.consume(500, 0.2) if m.error() is None]
            if reassignments[0] != before:
                # The assignment changed inside this call: records fetched before it (possibly of
                # partitions given up, or lost after a session timeout) can come with records fetched
                # again from the committed offsets, and the positions no longer describe the batch.
                _rewind(consumer, journal)
                continue
            positions = _positions(consumer)
            if not messages:
                # Positions also move past transaction markers and aborted records, which are never
                # handed out: commit them in a transaction of offsets alone, or the group never
                # reaches the end of a partition that ends with a marker.
                if any(committed.get(tp.partition) != tp.offset for tp in positions):
                    producer.begin_transaction()
                    if commit(positions) == COMMIT:
                        committed = {tp.partition: tp.offset for tp in positions}
                    else:
                        _rewind(consumer, journal)
                continue
            batch = [(m.partition(), decode_value(m.value())) for m in messages]
            inputs: dict[int, list[int]] = {}  # partition -> [first, last] offset copied: evidence for a failed check
            for m in messages:
                inputs.setdefault(m.partition(), [m.offset(), m.offset()])[1] = m.offset()
            txn = f"{args.name}/{incarnation}:{number}"
            number += 1
            producer.begin_transaction()
            for partition, source in batch:
                copy = WorkloadRecord(copy_producer(args.group, source.producer), source.seq, txn, len(batch))
                _produce(producer, args.output, encode_value(copy), partition)
            outcome = commit(positions)
            journal.write("txn", txn=txn, outcome=outcome, size=len(batch), inputs=inputs)
            if outcome == ABORT:
                _rewind(consumer, journal)
            else:
                committed = {tp.partition: tp.offset for tp in positions}
    except KafkaException as exc:
        fatal.append(str(exc))
        print(f"{args.name}: {exc}", file=sys.stderr)
    finally:
        consumer.close()
    return 1 if fatal else 0


WORKLOADS: dict[str, Callable[[argparse.Namespace, Journal, Stop], int]] = {
    "idempotent-producer": idempotent_producer,
    "group-consumer": group_consumer,
    "transactional-producer": transactional_producer,
    "copy-app": copy_app,
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
    parser.add_argument("--output", help="the topic a copy app writes to")
    parser.add_argument("--txn-size", type=int, default=5, help="records in each of a producer's transactions")
    parser.add_argument("--client-config", type=json.loads, default={}, metavar="JSON",
                        help='librdkafka settings every client of the workload gets, as a JSON object '
                             '({"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", ...})')
    parser.add_argument("--abort-every", type=int, default=0,
                        help="a transactional producer aborts every Nth transaction on purpose (0: never)")
    args = parser.parse_args(argv)
    CLIENT.update(args.client_config)  # this process's clients: one workload a process
    stop = Stop()
    journal = Journal(args.journal, args.name)
    try:
        return WORKLOADS[args.workload](args, journal, stop)
    finally:
        journal.close()


if __name__ == "__main__":
    sys.exit(main())
