"""`moldau transactions list|describe|describe-producers|find-hanging|abort`, as kafka-transactions.sh
(KIP-664), with its tables.

A transaction hangs in a partition when the partition holds its records but no coordinator will ever send
its marker: left by a bug, a lost marker or a hand-made write. Its last stable offset then stays at the
transaction's first offset, and read_committed consumers stop there.

find-hanging asks each partition's leader for its producers (DescribeProducers); an open transaction whose
producer last wrote longer ago than the largest transaction timeout is hanging unless its producer id
belongs to a transactional id (ListTransactions on every broker) whose coordinator still lists that
partition in the transaction (DescribeTransactions).

abort writes an abort marker in one partition (WriteTxnMarkers, as Kafka's admin client sends it) for the
producer whose open transaction starts at --start-offset, with that producer's epoch and coordinator epoch
(0 when it has seen no coordinator), if that transaction hangs; or, as Kafka's tool does for brokers before
3.0, for the producer, epoch and coordinator epoch given, unchecked.
"""

from __future__ import annotations

from dataclasses import dataclass

from storage import clock

from ..errors import ErrorCode
from . import command
from .client import AdminClient, AdminError, KafkaError
from .table import tab_table

TOOL = "transactions"
LIST_HEADERS = ("TransactionalId", "Coordinator", "ProducerId", "TransactionState")
DESCRIBE_HEADERS = ("CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState",
                    "TransactionTimeoutMs", "CurrentTransactionStartTimeMs", "TransactionDurationMs", "TopicPartitions")
PRODUCERS_HEADERS = ("ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence", "LastTimestamp",
                     "CurrentTransactionStartOffset")
FIND_HANGING_HEADERS = ("Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch", "StartOffset",
                        "LastTimestamp", "Duration(min)")


@dataclass
class OpenTransaction:
    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    start_offset: int
    last_timestamp: int


async def open_transactions(admin: AdminClient, partitions: list[tuple[str, int]]) -> list[OpenTransaction]:
    """Every transaction open in ``partitions``, from their leaders' producer state."""
    found = []
    for (topic, partition), producers in (await admin.describe_producers(partitions)).items():
        found += [OpenTransaction(topic, partition, s["producer_id"], s["producer_epoch"], s["coordinator_epoch"],
                                  s["current_txn_start_offset"], s["last_timestamp"])
                  for s in producers if s["current_txn_start_offset"] >= 0]
    return found


async def _coordinator_partitions(admin: AdminClient, transactional_id: str) -> set[tuple[str, int]] | None:
    """The partitions the transactional id's coordinator says its transaction holds; None if it is unknown."""
    try:
        state = await admin.describe_transaction(transactional_id)
    except KafkaError as exc:
        if exc.code == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND:
            return None
        raise
    return {(t["topic"], p) for t in state["topics"] for p in t["partitions"]}


async def hanging(admin: AdminClient, candidates: list[OpenTransaction]) -> list[OpenTransaction]:
    """The open transactions no coordinator holds: their producer id belongs to no transactional id, or
    its coordinator does not list the partition in the transaction."""
    if not candidates:
        return []
    producer_ids = {t.producer_id for t in candidates}
    ids = {t["producer_id"]: t["transactional_id"] for t in await admin.list_transactions(producer_ids=producer_ids)
           if t["producer_id"] in producer_ids}
    held = {tid: await _coordinator_partitions(admin, tid) for tid in set(ids.values())}
    return [t for t in candidates
            if (tps := held.get(ids.get(t.producer_id))) is None or (t.topic, t.partition) not in tps]


async def find_hanging(admin: AdminClient, partitions: list[tuple[str, int]], max_timeout_ms: int,
                       now_ms: int) -> list[OpenTransaction]:
    """Hanging transactions among those whose producer last wrote longer than ``max_timeout_ms`` ago."""
    return await hanging(admin, [t for t in await open_transactions(admin, partitions)
                                 if now_ms - t.last_timestamp > max_timeout_ms])


async def abort(admin: AdminClient, topic: str, partition: int, start_offset: int | None, producer_id: int | None,
                producer_epoch: int | None, coordinator_epoch: int | None) -> OpenTransaction:
    """Write the abort marker; returns what it ended (as given, without --start-offset).

    A transaction found by its start offset is aborted only if it hangs: one its coordinator still holds
    would lose atomicity (its other partitions may commit), so the coordinator is left to end it.
    """
    if start_offset is not None:
        match = [t for t in await open_transactions(admin, [(topic, partition)]) if t.start_offset == start_offset]
        if not match:
            raise AdminError(f"no open transaction starts at offset {start_offset} in {topic}-{partition}")
        (txn,) = match
        if not await hanging(admin, [txn]):
            raise AdminError(f"the transaction of producer {txn.producer_id} at offset {start_offset} in "
                             f"{topic}-{partition} is not hanging: its coordinator will end it")
    else:
        txn = OpenTransaction(topic, partition, producer_id, producer_epoch, coordinator_epoch, -1, -1)
    # A producer that never saw a marker reports coordinator epoch -1; 0 is at most any real one.
    await admin.abort_transaction(topic, partition, txn.producer_id, txn.producer_epoch, max(txn.coordinator_epoch, 0))
    return txn


async def _partitions(admin: AdminClient, topic: str | None, partition: int | None) -> list[tuple[str, int]]:
    if topic is not None and partition is not None:
        return [(topic, partition)]
    meta = await admin.metadata(None if topic is None else [topic])
    found = sorted((t.name, p) for t in meta.topics.values() if not t.error for p in t.partitions)
    if topic is not None and not found:
        raise AdminError(f"no topic {topic}")
    return found


def _none(value: int) -> str:
    return "None" if value < 0 else str(value)


def add_parser(sub) -> None:
    parser = command.tool_parser(
        sub, TOOL, help="list, describe and abort transactions (like kafka-transactions.sh)",
        description="List and describe transactions and the producers of a partition; find transactions that "
                    "hold a partition's last stable offset with no coordinator to end them, and abort them.")
    actions = parser.add_subparsers(dest="action", required=True)
    listing = actions.add_parser("list", help="list the transactions every broker coordinates")
    listing.add_argument("--state", action="append", default=[], help="only transactions in this state (repeatable)")
    describe = actions.add_parser("describe", help="describe a transactional id's transaction")
    describe.add_argument("--transactional-id", required=True)
    producers = actions.add_parser("describe-producers", help="the active producers of a partition")
    producers.add_argument("--topic", required=True)
    producers.add_argument("--partition", type=int, required=True)
    producers.add_argument("--broker-id", type=int, help="ask this broker instead of the partition's leader")
    find = actions.add_parser("find-hanging", help="list hanging transactions")
    find.add_argument("--topic", help="only this topic (default: every topic)")
    find.add_argument("--partition", type=int, help="only this partition (needs --topic)")
    find.add_argument("--max-transaction-timeout", type=int, default=15, metavar="MINUTES",
                      help="open transactions whose producer wrote within this many minutes are left out "
                           "(default %(default)s, transaction.max.timeout.ms's default)")
    end = actions.add_parser("abort", help="abort a hanging transaction in one partition")
    end.add_argument("--topic", required=True)
    end.add_argument("--partition", type=int, required=True)
    end.add_argument("--start-offset", type=int, help="the first offset of the transaction to abort")
    end.add_argument("--producer-id", type=int, help="instead of --start-offset: the producer id ...")
    end.add_argument("--producer-epoch", type=int, help="... its epoch ...")
    end.add_argument("--coordinator-epoch", type=int, help="... and its coordinator epoch")
    for action in (listing, describe, producers, find, end):
        command.one_line_errors(action, TOOL)


def run(args) -> int:
    if args.action == "find-hanging" and args.partition is not None and args.topic is None:
        return command.fail(TOOL, "--partition needs --topic")
    if args.action == "abort" and args.start_offset is None and None in (
            args.producer_id, args.producer_epoch, args.coordinator_epoch):
        return command.fail(TOOL, "name the transaction with --start-offset, or with --producer-id, "
                                  "--producer-epoch and --coordinator-epoch")
    return command.run(TOOL, args, lambda admin: _ACTIONS[args.action](admin, args))


async def _list(admin: AdminClient, args) -> None:
    found = sorted(await admin.list_transactions(states=args.state), key=lambda t: t["transactional_id"])
    print(tab_table(LIST_HEADERS, [(t["transactional_id"], t["coordinator"], t["producer_id"],
                                    t["transaction_state"]) for t in found]))


async def _describe(admin: AdminClient, args) -> None:
    state = await admin.describe_transaction(args.transactional_id)
    start = state["transaction_start_time_ms"]
    duration = clock.wall_ms() - start if start >= 0 else -1
    print(tab_table(DESCRIBE_HEADERS, [(
        state["coordinator"], state["transactional_id"], state["producer_id"], state["producer_epoch"],
        state["transaction_state"], state["transaction_timeout_ms"], _none(start), _none(duration),
        ",".join(f"{t['topic']}-{p}" for t in state["topics"] for p in t["partitions"]))]))


async def _describe_producers(admin: AdminClient, args) -> None:
    found = await admin.describe_producers([(args.topic, args.partition)], args.broker_id)
    print(tab_table(PRODUCERS_HEADERS, [(
        s["producer_id"], s["producer_epoch"], _none(s["coordinator_epoch"]), s["last_sequence"], s["last_timestamp"],
        _none(s["current_txn_start_offset"])) for s in found[(args.topic, args.partition)]]))


async def _find_hanging(admin: AdminClient, args) -> None:
    now = clock.wall_ms()
    found = await find_hanging(admin, await _partitions(admin, args.topic, args.partition),
                               args.max_transaction_timeout * 60_000, now)
    print(tab_table(FIND_HANGING_HEADERS, [
        (t.topic, t.partition, t.producer_id, t.producer_epoch, t.coordinator_epoch, t.start_offset,
         t.last_timestamp, (now - t.last_timestamp) // 60_000) for t in found]))


async def _abort(admin: AdminClient, args) -> None:
    txn = await abort(admin, args.topic, args.partition, args.start_offset, args.producer_id, args.producer_epoch,
                      args.coordinator_epoch)
    start = "" if txn.start_offset < 0 else f" starting at offset {txn.start_offset}"
    print(f"aborted the transaction of producer {txn.producer_id} (epoch {txn.producer_epoch}){start} "
          f"in {args.topic}-{args.partition}")


_ACTIONS = {"list": _list, "describe": _describe, "describe-producers": _describe_producers,
            "find-hanging": _find_hanging, "abort": _abort}
