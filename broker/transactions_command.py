"""`moldau transactions find-hanging|abort`: find and end hanging transactions, as kafka-transactions.sh does (KIP-664).

A transaction hangs in a partition when the partition holds its records but
no coordinator will ever send its marker: left by a bug, a lost marker or a
hand-made write. Its last stable offset then stays at the transaction's first
offset, and read_committed consumers stop there.

find-hanging asks each partition's leader for its producers (DescribeProducers);
an open transaction whose producer last wrote longer ago than the largest
transaction timeout is hanging unless its producer id belongs to a
transactional id (ListTransactions on every broker) whose coordinator still
lists that partition in the transaction (DescribeTransactions).

abort writes an abort marker in one partition (WriteTxnMarkers, as Kafka's
admin client sends it) for the producer whose open transaction starts at
--start-offset, with that producer's epoch and coordinator epoch (0 when it
has seen no coordinator), if that transaction hangs; or, as Kafka's tool
does for brokers before 3.0, for the producer, epoch and coordinator epoch
given, unchecked.

The tool speaks the wire protocol through the broker's own codec, so it needs
no client library.
"""

from __future__ import annotations

import argparse
import socket
import struct
import sys
import time
from dataclasses import dataclass

from protocol.frames import decode_response, encode_request

from .errors import ErrorCode

CLIENT_ID = "moldau-transactions"
NO_COORDINATOR_EPOCH = -1
TRANSACTION_KEY_TYPE = 1  # FindCoordinator's key type of transactional ids

# The versions the tool sends: ones every broker since Kafka 3.0 (and Moldau) serves.
VERSIONS = {"Metadata": 9, "FindCoordinator": 3, "DescribeProducers": 0, "ListTransactions": 0,
            "DescribeTransactions": 0, "WriteTxnMarkers": 1}

FIND_HANGING_HEADERS = ("Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch", "StartOffset",
                        "LastTimestamp", "Duration(min)")


class CommandError(Exception):
    """What went wrong, in one line for the operator."""


def _error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error {code}"


class Cluster:
    """Blocking connections to the brokers of one cluster, found from a bootstrap address."""

    def __init__(self, bootstrap: str, timeout_s: float):
        self.timeout_s = timeout_s
        self._sockets: dict[object, socket.socket] = {}
        self._correlation_id = 0
        host, _, port = bootstrap.rpartition(":")
        if not port.isdigit():
            raise CommandError(f"--bootstrap-server {bootstrap!r} is not host:port")
        self._bootstrap = (host or "127.0.0.1", int(port))
        metadata = self.send(None, "Metadata", {"topics": None, "allow_auto_topic_creation": False,
                                                "include_cluster_authorized_operations": False,
                                                "include_topic_authorized_operations": False})
        self.brokers = {b["node_id"]: (b["host"], b["port"]) for b in metadata["brokers"]}
        self.leaders: dict[tuple[str, int], int] = {}
        for topic in metadata["topics"]:
            for p in topic["partitions"]:
                self.leaders[(topic["name"], p["partition_index"])] = p["leader_id"]

    def send(self, node_id: int | None, api: str, body: dict) -> dict:
        """One request to a broker (None: the bootstrap address) and its response."""
        version = VERSIONS[api]
        address = self._bootstrap if node_id is None else self.brokers[node_id]
        sock = self._sockets.get(address)
        try:
            if sock is None:
                sock = self._sockets[address] = socket.create_connection(address, timeout=self.timeout_s)
            self._correlation_id += 1
            sock.sendall(encode_request(api, version, self._correlation_id, CLIENT_ID, body))
            (size,) = struct.unpack(">i", _recv(sock, 4))
            correlation_id, response = decode_response(api, version, memoryview(_recv(sock, size)))
        except (OSError, ValueError, struct.error) as exc:  # unreachable, or not a Kafka broker's answer
            raise CommandError(f"{api} to {address[0]}:{address[1]}: {exc}") from None
        if correlation_id != self._correlation_id:
            raise CommandError(f"{api}: the answer is to request {correlation_id}, not {self._correlation_id}")
        return response

    def leader(self, topic: str, partition: int) -> int:
        leader = self.leaders.get((topic, partition), -1)
        if leader < 0:
            raise CommandError(f"{topic}-{partition}: no such partition, or it has no leader")
        return leader

    def close(self) -> None:
        for sock in self._sockets.values():
            sock.close()


def _recv(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("the broker closed the connection")
        buf += chunk
    return bytes(buf)


@dataclass
class OpenTransaction:
    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    start_offset: int
    last_timestamp: int


def open_transactions(cluster: Cluster, partitions: list[tuple[str, int]]) -> list[OpenTransaction]:
    """Every transaction open in ``partitions``, from their leaders' producer state."""
    by_leader: dict[int, dict[str, list[int]]] = {}
    for topic, partition in partitions:
        by_leader.setdefault(cluster.leader(topic, partition), {}).setdefault(topic, []).append(partition)
    found = []
    for leader, topics in by_leader.items():
        response = cluster.send(leader, "DescribeProducers", {"topics": [
            {"name": name, "partition_indexes": indexes} for name, indexes in topics.items()]})
        for topic in response["topics"]:
            for p in topic["partitions"]:
                if p["error_code"]:
                    raise CommandError(f"DescribeProducers {topic['name']}-{p['partition_index']}: "
                                       f"{_error_name(p['error_code'])}")
                found += [OpenTransaction(topic["name"], p["partition_index"], s["producer_id"], s["producer_epoch"],
                                          s["coordinator_epoch"], s["current_txn_start_offset"], s["last_timestamp"])
                          for s in p["active_producers"] if s["current_txn_start_offset"] >= 0]
    return found


def _transactional_ids(cluster: Cluster, producer_ids: set[int]) -> dict[int, str]:
    """Producer id -> transactional id, from every broker's ListTransactions."""
    found = {}
    for node_id in cluster.brokers:
        response = cluster.send(node_id, "ListTransactions", {"state_filters": [],
                                                              "producer_id_filters": sorted(producer_ids)})
        if response["error_code"]:
            raise CommandError(f"ListTransactions on node {node_id}: {_error_name(response['error_code'])}")
        found.update((t["producer_id"], t["transactional_id"]) for t in response["transaction_states"]
                     if t["producer_id"] in producer_ids)
    return found


def _coordinator_partitions(cluster: Cluster, transactional_id: str) -> set[tuple[str, int]] | None:
    """The partitions the transactional id's coordinator says its transaction holds; None if it is unknown."""
    coordinator = cluster.send(None, "FindCoordinator", {"key": transactional_id, "key_type": TRANSACTION_KEY_TYPE})
    if coordinator["error_code"]:
        raise CommandError(f"FindCoordinator {transactional_id}: {_error_name(coordinator['error_code'])}")
    cluster.brokers.setdefault(coordinator["node_id"], (coordinator["host"], coordinator["port"]))
    response = cluster.send(coordinator["node_id"], "DescribeTransactions", {"transactional_ids": [transactional_id]})
    (state,) = response["transaction_states"]
    if state["error_code"] == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND:
        return None
    if state["error_code"]:
        raise CommandError(f"DescribeTransactions {transactional_id}: {_error_name(state['error_code'])}")
    return {(t["topic"], p) for t in state["topics"] for p in t["partitions"]}


def hanging(cluster: Cluster, candidates: list[OpenTransaction]) -> list[OpenTransaction]:
    """The open transactions no coordinator holds: their producer id belongs to no transactional id, or
    its coordinator does not list the partition in the transaction."""
    ids = _transactional_ids(cluster, {t.producer_id for t in candidates}) if candidates else {}
    held = {tid: _coordinator_partitions(cluster, tid) for tid in set(ids.values())}
    return [t for t in candidates
            if (tps := held.get(ids.get(t.producer_id))) is None or (t.topic, t.partition) not in tps]


def find_hanging(cluster: Cluster, partitions: list[tuple[str, int]], max_timeout_ms: int,
                 now_ms: int) -> list[OpenTransaction]:
    """Hanging transactions among those whose producer last wrote longer than ``max_timeout_ms`` ago."""
    return hanging(cluster, [t for t in open_transactions(cluster, partitions)
                             if now_ms - t.last_timestamp > max_timeout_ms])


def abort(cluster: Cluster, topic: str, partition: int, start_offset: int | None, producer_id: int | None,
          producer_epoch: int | None, coordinator_epoch: int | None) -> OpenTransaction:
    """Write the abort marker; returns what it ended (as given, without --start-offset).

    A transaction found by its start offset is aborted only if it hangs: one
    its coordinator still holds would lose atomicity (its other partitions
    may commit), so the coordinator is left to end it.
    """
    if start_offset is not None:
        match = [t for t in open_transactions(cluster, [(topic, partition)]) if t.start_offset == start_offset]
        if not match:
            raise CommandError(f"no open transaction starts at offset {start_offset} in {topic}-{partition}")
        (txn,) = match
        if not hanging(cluster, [txn]):
            raise CommandError(f"the transaction of producer {txn.producer_id} at offset {start_offset} in "
                               f"{topic}-{partition} is not hanging: its coordinator will end it")
    else:
        txn = OpenTransaction(topic, partition, producer_id, producer_epoch, coordinator_epoch, -1, -1)
    # A producer that never saw a marker reports coordinator epoch -1; 0 is at most any real one.
    marker = {"producer_id": txn.producer_id, "producer_epoch": txn.producer_epoch, "transaction_result": False,
              "coordinator_epoch": max(txn.coordinator_epoch, 0),
              "topics": [{"name": topic, "partition_indexes": [partition]}]}
    response = cluster.send(cluster.leader(topic, partition), "WriteTxnMarkers", {"markers": [marker]})
    error = response["markers"][0]["topics"][0]["partitions"][0]["error_code"]
    if error:
        raise CommandError(f"WriteTxnMarkers for producer {txn.producer_id} epoch {txn.producer_epoch} in "
                           f"{topic}-{partition}: {_error_name(error)}")
    return txn


def _table(rows: list[tuple]) -> str:
    cells = [FIND_HANGING_HEADERS, *[tuple(map(str, row)) for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(FIND_HANGING_HEADERS))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in cells)


def _partitions(cluster: Cluster, topic: str | None, partition: int | None) -> list[tuple[str, int]]:
    if topic is not None and partition is not None:
        return [(topic, partition)]
    found = sorted(tp for tp in cluster.leaders if topic is None or tp[0] == topic)
    if topic is not None and not found:
        raise CommandError(f"no topic {topic}")
    return found


def add_parser(sub) -> None:
    parser = sub.add_parser(
        "transactions", help="find and abort hanging transactions (like kafka-transactions.sh)",
        description="Find transactions that hold a partition's last stable offset with no coordinator to end "
                    "them, and abort them.")
    parser.add_argument("--bootstrap-server", default="127.0.0.1:9092", help="broker address (default %(default)s)")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds per request (default %(default)s)")
    actions = parser.add_subparsers(dest="action", required=True)
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


def run(args) -> int:
    if args.action == "find-hanging" and args.partition is not None and args.topic is None:
        return _fail("--partition needs --topic")
    if args.action == "abort" and args.start_offset is None and None in (
            args.producer_id, args.producer_epoch, args.coordinator_epoch):
        return _fail("name the transaction with --start-offset, or with --producer-id, --producer-epoch "
                     "and --coordinator-epoch")
    try:
        cluster = Cluster(args.bootstrap_server, args.timeout)
    except CommandError as exc:
        return _fail(str(exc))
    try:
        if args.action == "find-hanging":
            now = int(time.time() * 1000)
            hanging = find_hanging(cluster, _partitions(cluster, args.topic, args.partition),
                                   args.max_transaction_timeout * 60_000, now)
            print(_table([(t.topic, t.partition, t.producer_id, t.producer_epoch, t.coordinator_epoch,
                           t.start_offset, t.last_timestamp, (now - t.last_timestamp) // 60_000) for t in hanging]))
        else:
            txn = abort(cluster, args.topic, args.partition, args.start_offset, args.producer_id,
                        args.producer_epoch, args.coordinator_epoch)
            start = "" if txn.start_offset < 0 else f" starting at offset {txn.start_offset}"
            print(f"aborted the transaction of producer {txn.producer_id} (epoch {txn.producer_epoch}){start} "
                  f"in {args.topic}-{args.partition}")
    except CommandError as exc:
        return _fail(str(exc))
    finally:
        cluster.close()
    return 0


def _fail(message: str) -> int:
    print(f"moldau transactions: {message}", file=sys.stderr)
    return 1
