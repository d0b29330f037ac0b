"""TransactionVerifier: a partition leader asks a producer's transaction coordinator about its partitions.

Before a partition leader takes the first transactional batch of a
producer's transaction (KIP-890), the transaction coordinator must confirm
that the partition is in that transaction -- or, for a producer of
transaction version 2, add it. When this broker coordinates the
transactional id, the coordinator is asked directly; otherwise the leader of
the id's __transaction_state partition is sent AddPartitionsToTxn (v4+,
verify_only unless adding, as Kafka's AddPartitionsToTxnManager does) over
the inter-broker channel. A coordinator that cannot be reached, or none
elected yet, is COORDINATOR_NOT_AVAILABLE, which the writer's client
retries.
"""

from __future__ import annotations

import logging

from broker.cluster.channel import InterBrokerChannel
from broker.coordinator.internal_topics import partition_for
from broker.errors import ErrorCode

from ..coordinator.internal_topics import TRANSACTION_STATE_TOPIC
from .metadata import TopicPartition

ADD_PARTITIONS_VERSION = 5

log = logging.getLogger("moldau.transaction")


class TransactionVerifier:
    def __init__(self, broker) -> None:
        self.broker = broker
        # connections of its own (Kafka's client id): verifications do not queue behind markers
        self.channel = InterBrokerChannel(broker, f"AddPartitionsManager-client-{broker.node_id}")

    def coordinator(self, transactional_id: str) -> int:
        """The node coordinating the id: its __transaction_state partition's leader (-1: none now)."""
        partition = partition_for(transactional_id, self.broker.transactions.state_manager.num_partitions)
        state = self.broker.store.cache.partition_state(TRANSACTION_STATE_TOPIC, partition)
        return -1 if state is None else state.leader

    def is_remote(self, transactional_id: str | None) -> bool:
        """Whether another broker coordinates the id (no id: none does, this broker's coordinator refuses it)."""
        return bool(transactional_id) and self.coordinator(transactional_id) != self.broker.node_id

    async def verify(self, transactional_id: str, producer_id: int, epoch: int, partitions: list[TopicPartition],
                     add: bool) -> dict[TopicPartition, ErrorCode]:
        """The coordinator's answer per partition (NONE: in the transaction, added if ``add``)."""
        node = self.coordinator(transactional_id)
        if node < 0:
            return dict.fromkeys(partitions, ErrorCode.COORDINATOR_NOT_AVAILABLE)
        by_topic: dict[str, list[int]] = {}
        for topic, index in partitions:
            by_topic.setdefault(topic, []).append(index)
        body = {"transactions": [{
            "transactional_id": transactional_id, "producer_id": producer_id, "producer_epoch": epoch,
            "verify_only": not add,
            "topics": [{"name": topic, "partitions": indexes} for topic, indexes in by_topic.items()],
        }]}
        try:
            response = await self.channel.send(node, "AddPartitionsToTxn", ADD_PARTITIONS_VERSION, body)
        except Exception as exc:  # noqa: BLE001 -- unreachable, slow, or an answer that does not decode: ask again later
            log.warning("verifying %s's partitions with broker %d failed: %s", transactional_id, node,
                        exc or type(exc).__name__)
            return dict.fromkeys(partitions, ErrorCode.COORDINATOR_NOT_AVAILABLE)
        if response["error_code"]:
            return dict.fromkeys(partitions, ErrorCode(response["error_code"]))
        found = {(t["name"], p["partition_index"]): ErrorCode(p["partition_error_code"])
                 for txn in response["results_by_transaction"] for t in txn["topic_results"]
                 for p in t["results_by_partition"]}
        return {tp: found.get(tp, ErrorCode.INVALID_TXN_STATE) for tp in partitions}
