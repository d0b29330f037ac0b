"""TransactionMarkerChannelManager: writes a finished transaction's markers in all of its partitions.

Each partition leader gets one marker per transaction, naming all of the
transaction's partitions it leads, and the leaders are written to at once.
Requests go through a channel that speaks the wire protocol to a broker by
node id (InterBrokerChannel: loopback to this broker, the network to
others). As Kafka's marker sender does, each destination has one request in
flight: markers of other transactions that queue meanwhile travel together
in the next WriteTxnMarkers. Partitions whose marker failed for a reason
that can pass -- the leader moved (NOT_LEADER_OR_FOLLOWER), is unknown or
unreachable, or its replicas did not confirm in time -- are sent again,
after a backoff, to the leader the metadata then names, until every
partition has its marker; only then may the coordinator write
CompleteCommit or CompleteAbort.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Callable, Protocol

from broker.errors import ErrorCode
from storage import clock

from .metadata import TopicPartition

WRITE_TXN_MARKERS_VERSION = 1
RETRY_BACKOFF_S = 0.1
MAX_RETRY_BACKOFF_S = 5.0

# the partition has its marker, or needs none because it no longer exists
_DONE = {ErrorCode.NONE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
# a newer producer epoch or coordinator already ended the producer's transaction there
_SUPERSEDED = {ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.TRANSACTION_COORDINATOR_FENCED}

log = logging.getLogger("moldau.transaction")


class BrokerChannel(Protocol):
    async def send(self, node_id: int, api: str, version: int, body: dict) -> dict: ...


class TransactionMarkerChannelManager:
    def __init__(self, channel: BrokerChannel, partition_leader: Callable[[str, int], int | None], supervisor):
        self.channel = channel
        self.partition_leader = partition_leader
        self.supervisor = supervisor
        # per destination: markers waiting for the request in flight there to finish
        self._queued: dict[int, list[tuple[dict, asyncio.Future]]] = {}

    async def write_markers(
        self, producer_id: int, producer_epoch: int, committed: bool, coordinator_epoch: int,
        partitions: frozenset[TopicPartition],
    ) -> None:
        """Return once every one of ``partitions`` that still exists has the marker."""
        remaining = set(partitions)
        backoff = RETRY_BACKOFF_S
        while True:
            by_leader: dict[int, list[TopicPartition]] = {}
            for tp in sorted(remaining):
                leader = self.partition_leader(*tp)
                if leader is None:
                    remaining.discard(tp)  # deleted: nobody reads it any more
                elif leader >= 0:  # (none while it is being elected: wait for one)
                    by_leader.setdefault(leader, []).append(tp)
            leaders = list(by_leader)
            results = await asyncio.gather(*(self._send(leader, {
                "producer_id": producer_id,
                "producer_epoch": producer_epoch,
                "transaction_result": committed,
                "topics": _topics(by_leader[leader]),
                "coordinator_epoch": coordinator_epoch,
            }) for leader in leaders), return_exceptions=True)
            for leader, result in zip(leaders, results, strict=False):
                if isinstance(result, Exception):  # whatever failed, the transaction stays open until its markers land
                    log.warning("WriteTxnMarkers to broker %d failed (%s); will retry", leader,
                                result or type(result).__name__, exc_info=_unexpected(result))
                else:
                    remaining -= _finished(result, producer_id)
            if not remaining:
                return
            await clock.sleep(backoff)
            backoff = min(backoff * 2, MAX_RETRY_BACKOFF_S)

    async def _send(self, node_id: int, marker: dict) -> dict:
        """The broker's result for ``marker`` (its entry of a WriteTxnMarkers response)."""
        future = asyncio.get_running_loop().create_future()
        queued = self._queued.get(node_id)
        if queued is not None:
            queued.append((marker, future))  # the sender in flight there takes it next
        else:
            self._queued[node_id] = [(marker, future)]
            self.supervisor.start(f"TxnMarkerSenderThread-{node_id}", lambda: self._sender(node_id))
        return await future

    async def _sender(self, node_id: int) -> None:
        """Send what is queued for the broker, one request at a time, until nothing is."""
        while batch := self._queued[node_id]:
            self._queued[node_id] = []
            try:
                response = await self.channel.send(node_id, "WriteTxnMarkers", WRITE_TXN_MARKERS_VERSION,
                                                   {"markers": [marker for marker, _ in batch]})
                results = response["markers"]
                if [r["producer_id"] for r in results] != [m["producer_id"] for m, _ in batch]:
                    raise ValueError("the response names other producers than the request")
            except (Exception, asyncio.CancelledError) as exc:  # cancelled: its markers are sent again
                failure = exc if isinstance(exc, Exception) else ConnectionError(f"sender to {node_id} stopped")
                for _, future in batch:
                    if not future.done():
                        future.set_exception(failure)
                if failure is not exc:
                    raise
                continue
            for (_, future), result in zip(batch, results, strict=False):
                if not future.done():  # (not if its transaction's task was cancelled meanwhile)
                    future.set_result(result)
        del self._queued[node_id]


def _unexpected(exc: Exception) -> bool:
    """Whether a failed request deserves its traceback: not for a broker that is away or slow."""
    return not isinstance(exc, (OSError, EOFError, asyncio.TimeoutError))


def _topics(partitions: list[TopicPartition]) -> list[dict]:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    return [{"name": topic, "partition_indexes": indexes} for topic, indexes in by_topic.items()]


def _finished(result: dict, producer_id: int) -> set[TopicPartition]:
    """The partitions of a marker's result that need no marker sent again."""
    finished = set()
    for topic in result["topics"]:
        for p in topic["partitions"]:
            tp, error = (topic["name"], p["partition_index"]), p["error_code"]
            if error in _DONE:
                finished.add(tp)
            elif error in _SUPERSEDED:
                log.warning("marker of producer %d for %s-%d refused (error %d): a newer one ended it",
                            producer_id, *tp, error)
                finished.add(tp)
            else:
                log.warning("marker of producer %d for %s-%d failed (error %d); will retry",
                            producer_id, *tp, error)
    return finished
