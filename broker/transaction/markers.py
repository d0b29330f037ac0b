"""TransactionMarkerChannelManager: writes a finished transaction's markers in all of its partitions.

For each partition leader, one WriteTxnMarkers request carries the markers
of every partition of the transaction that it leads. Requests go through a
channel that speaks the wire protocol to a broker by node id -- on this
single broker, the LoopbackChannel to itself -- so a cluster needs another
channel, not another design. Partitions whose marker failed for a reason
that can pass are sent again after a backoff, until every partition has
its marker; only then may the coordinator write CompleteCommit or
CompleteAbort.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Callable, Protocol

from broker.errors import ErrorCode

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
    def __init__(self, channel: BrokerChannel, partition_leader: Callable[[str, int], int | None]):
        self.channel = channel
        self.partition_leader = partition_leader

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
                else:
                    by_leader.setdefault(leader, []).append(tp)
            for leader, leader_partitions in by_leader.items():
                marker = {
                    "producer_id": producer_id,
                    "producer_epoch": producer_epoch,
                    "transaction_result": committed,
                    "topics": _topics(leader_partitions),
                    "coordinator_epoch": coordinator_epoch,
                }
                try:
                    response = await self.channel.send(
                        leader, "WriteTxnMarkers", WRITE_TXN_MARKERS_VERSION, {"markers": [marker]})
                    remaining -= _finished(response, producer_id)
                except Exception as exc:  # whatever failed, the transaction stays open until its markers land
                    log.warning("WriteTxnMarkers to node %d failed (%s); will retry", leader, exc,
                                exc_info=not isinstance(exc, OSError))
            if not remaining:
                return
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, MAX_RETRY_BACKOFF_S)


def _topics(partitions: list[TopicPartition]) -> list[dict]:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    return [{"name": topic, "partition_indexes": indexes} for topic, indexes in by_topic.items()]


def _finished(response: dict, producer_id: int) -> set[TopicPartition]:
    """The partitions of a WriteTxnMarkers response that need no marker sent again."""
    finished = set()
    for marker in response["markers"]:
        for topic in marker["topics"]:
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
