"""``moldau pipeline run`` (the streaming job) and ``moldau pipeline generate`` (its input)."""

from __future__ import annotations

import argparse
import logging
import signal
import threading

from . import configure_logging
from .clients import ensure_topic
from .events import flush_event, plan
from .generate import generate
from .job import start
from .spark import session

log = logging.getLogger(__name__)

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
DEFAULT_INPUT = "events"
DEFAULT_OUTPUT = "event-totals"
DEFAULT_PARTITIONS = 3


def _run(args) -> int:
    conf = {"bootstrap.servers": args.bootstrap}
    ensure_topic(conf, args.input, args.partitions)
    ensure_topic(conf, args.output, args.partitions)
    spark = session(master=args.master, kafka_connector=args.source == "kafka")
    query = start(spark, source=args.source, bootstrap=args.bootstrap, input_topic=args.input,
                  output_topic=args.output, checkpoint=args.checkpoint, trigger=args.trigger)
    log.info("query %s running: %s -> %s (source %s, checkpoint %s)", query.id, args.input, args.output,
             args.source, args.checkpoint)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    try:
        # short waits, so the signal handler gets to run; a failed query raises here
        while query.isActive and not stop.is_set():
            query.awaitTermination(1)
    finally:
        query.stop()
        spark.stop()
    log.info("stopped")
    return 0


def _generate(args) -> int:
    conf = {"bootstrap.servers": args.bootstrap}
    ensure_topic(conf, args.topic, args.partitions)
    txns = plan(args.seed, args.first, args.transactions, events_per_txn=args.events_per_transaction,
                abort_every=args.abort_every)
    flush = flush_event(args.first + args.transactions - 1) if args.finish else None
    generate(conf, args.topic, txns, transactional_id=args.transactional_id or f"moldau-generate-{args.topic}",
             flush=flush)
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="moldau pipeline",
                                description="A Spark Structured Streaming pipeline on Moldau, exactly once.")
    sub = p.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run the streaming job until Ctrl-C or SIGTERM",
                         description="Per-key counts and sums of the input events per 10-second event-time "
                                     "window, written once each to the output topic. Restarting with the same "
                                     "checkpoint resumes where the job stopped.")
    run.add_argument("--bootstrap", default=DEFAULT_BOOTSTRAP, help="broker address (default %(default)s)")
    run.add_argument("--input", default=DEFAULT_INPUT, help="input topic (default %(default)s)")
    run.add_argument("--output", default=DEFAULT_OUTPUT, help="output topic (default %(default)s)")
    run.add_argument("--partitions", type=int, default=DEFAULT_PARTITIONS,
                     help="partitions of a topic created here (default %(default)s)")
    run.add_argument("--checkpoint", default="pipeline-checkpoint",
                     help="Spark checkpoint directory (default ./%(default)s)")
    run.add_argument("--source", choices=("moldau", "kafka"), default="moldau",
                     help="moldau: the Python source, no jars; kafka: Spark's connector, whose jars come "
                          "from $MOLDAU_SPARK_KAFKA_JARS or are downloaded (default %(default)s)")
    run.add_argument("--trigger", default="1 second", help="micro-batch interval (default %(default)s)")
    run.add_argument("--master", default="local[2]", help="Spark master (default %(default)s)")
    run.set_defaults(func=_run)

    gen = sub.add_parser("generate", help="produce input events in transactions, some aborted",
                         description="Transactions are numbered; each one's events depend only on the seed "
                                     "and its number, so --first continues an earlier run.")
    gen.add_argument("--bootstrap", default=DEFAULT_BOOTSTRAP, help="broker address (default %(default)s)")
    gen.add_argument("--topic", default=DEFAULT_INPUT, help="input topic (default %(default)s)")
    gen.add_argument("--partitions", type=int, default=DEFAULT_PARTITIONS,
                     help="partitions of a topic created here (default %(default)s)")
    gen.add_argument("--seed", type=int, default=1)
    gen.add_argument("--first", type=int, default=0, help="number of the first transaction (default %(default)s)")
    gen.add_argument("--transactions", type=int, default=50, help="how many (default %(default)s)")
    gen.add_argument("--events-per-transaction", type=int, default=10)
    gen.add_argument("--abort-every", type=int, default=7,
                     help="abort every Nth transaction, 0 for none (default %(default)s)")
    gen.add_argument("--finish", action="store_true",
                     help="end with an event far ahead in event time, which closes every window so far")
    gen.add_argument("--transactional-id", help="default: moldau-generate-<topic>")
    gen.set_defaults(func=_generate)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    configure_logging()
    return args.func(args)
