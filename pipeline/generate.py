"""The input generator: produce a plan of transactions, committing or aborting each as planned."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping

from confluent_kafka import Producer

from .clients import TIMEOUT_S, produce
from .events import Event, Txn

log = logging.getLogger(__name__)


def generate(conf: Mapping[str, str], topic: str, txns: Iterable[Txn], *, transactional_id: str,
             flush: Event | None = None) -> None:
    """One transaction per planned ``Txn``; then, if given, ``flush`` alone in a last committed one.

    Records are keyed by the event's key, so the producer's partitioner
    spreads a transaction over several partitions.
    """
    producer = Producer({**conf, "transactional.id": transactional_id})
    producer.init_transactions(TIMEOUT_S)
    committed = aborted = 0
    for txn in txns:
        _begin(producer, topic, txn.events)
        if txn.commit:
            producer.commit_transaction(TIMEOUT_S)
            committed += 1
        else:
            # abort_transaction drops what is still queued: flush first, so the
            # aborted records really are in the log for readers to skip
            producer.flush(TIMEOUT_S)
            producer.abort_transaction(TIMEOUT_S)
            aborted += 1
    if flush is not None:
        _begin(producer, topic, (flush,))
        producer.commit_transaction(TIMEOUT_S)
    log.info("%s: committed %d transactions, aborted %d%s", topic, committed, aborted,
             ", then the flush event" if flush is not None else "")


def _begin(producer: Producer, topic: str, events: Iterable[Event]) -> None:
    """Begin a transaction and queue ``events`` in it."""
    producer.begin_transaction()
    for event in events:
        produce(producer, topic, event.key.encode(), event.to_json(), event.ts)
