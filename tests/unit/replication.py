"""A leader's replica of one partition in process: a real Log in a temporary directory, the real
ReplicaManager and Partition, and a metadata store that applies every ISR change it is asked for."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from types import SimpleNamespace

from broker.cluster.metadata import NO_LEADER, PartitionState
from broker.cluster.partition import Partition
from broker.cluster.replica_manager import ReplicaManager
from broker.fetch.delayed_fetch import FetchPurgatory
from protocol.records import build_batch
from storage.config import LogConfig
from storage.log import Log

from .conftest import append, run

NOW = 1_700_000_000_000
LAG_MS = 30_000  # replica.lag.time.max.ms


class Store:
    """Writes every proposed ISR, and the watch brings it back at once (``hold`` keeps them unwritten)."""

    def __init__(self) -> None:
        self.proposals: list[tuple[int, ...]] = []
        self.hold = False

    async def alter_partition(self, topic, index, current, proposed) -> bool:
        self.proposals.append(proposed.isr)
        if self.hold:
            await asyncio.Event().wait()
        self.manager.apply_state(topic, index, replace(proposed, version=current.version + 1))
        return True

    async def alter_partitions(self, changes) -> list[bool]:
        return [await self.alter_partition(*change) for change in changes]


class Replica:
    def __init__(self, directory, node_id: int = 1, replicas=(1, 2, 3), isr=(1, 2, 3), min_insync: int = 1,
                 leader: int | None = None):
        self.log = Log(directory / "t-0", LogConfig(min_insync_replicas=min_insync), now_ms=NOW)
        self.log.set_high_watermark(0)
        # the leadership of epoch 1 was taken before the test: its epoch checkpoint is durable already
        self.log.leader_epochs.assign(1, 0)
        self.tasks: list[asyncio.Task] = []
        self.leadership: list[tuple] = []
        self.broker = SimpleNamespace(
            node_id=node_id, config={"replica.lag.time.max.ms": LAG_MS}, fetch_purgatory=FetchPurgatory(),
            supervisor=SimpleNamespace(spawn=self._spawn), logs=SimpleNamespace(log=lambda t, i: self.log, log_dir=directory),
            leadership_changed=lambda *args: self.leadership.append(args))
        self.manager = ReplicaManager(self.broker)
        self.store = self.manager.store = Store()
        self.store.manager = self.manager
        self.partition = self.manager.partitions[("t", 0)] = Partition(
            self.manager, "t", 0, self.log, PartitionState(NO_LEADER, -1, (), ()))
        self.partition.apply(PartitionState(node_id if leader is None else leader, 1, tuple(isr), tuple(replicas)))

    def apply(self, state: PartitionState) -> None:
        """A change of leadership or ISR, applied in an event loop as the broker applies it; a new epoch's
        checkpoint is made durable before this returns."""
        async def main():
            self.partition.apply(state)
            await asyncio.gather(*self.tasks)

        run(main())

    def _spawn(self, coro) -> None:
        self.tasks.append(asyncio.get_running_loop().create_task(coro))

    def produce(self, records: int = 1) -> int:
        """Append ``records`` one-record batches; returns the log end offset after them."""
        for _ in range(records):
            append(self.log, build_batch([(b"k", b"v")], timestamp_ms=NOW), now_ms=NOW)
        self.manager.on_append("t", 0)
        return self.log.log_end_offset

    def fetch(self, replica: int, offset: int) -> None:
        self.partition.follower_fetched(replica, offset)

    @property
    def hw(self) -> int:
        return self.partition.high_watermark

    @property
    def isr(self) -> tuple[int, ...]:
        return self.partition.state.isr
