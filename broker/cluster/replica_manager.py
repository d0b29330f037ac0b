"""The ReplicaManager: this broker's replicas (Partition objects, partition.py), their roles, the ISR
changes they propose (written to the store in batches), the leader-epoch checkpoints made durable in one
sync, and the answers of delayed produces a moving high watermark completed.
"""

from __future__ import annotations

import asyncio
import logging

from broker import faults
from broker.cluster.partition import Partition
from broker.errors import ErrorCode
from storage import clock
from storage.files import sync_filesystem
from storage.log import Log

from .metadata import NO_LEADER, PartitionState

log = logging.getLogger("moldau.replica")
ROLE_SUMMARY_S = 0.1  # leaderships taken or given up within this long are logged in one line


class ReplicaManager:
    def __init__(self, broker) -> None:
        self.broker = broker
        self.node_id: int = broker.node_id
        self.partitions: dict[tuple[str, int], Partition] = {}
        self.store = None  # the metadata store, set by the broker
        self.fetchers = None  # a ReplicaFetcherManager in a cluster
        self.expansion_delay_s = faults.isr_expansion_delay_s()
        self.replication_wait_delay_s = faults.replication_wait_delay_s()
        # ISR changes of partitions this broker leads (Kafka's IsrShrinksPerSec, IsrExpandsPerSec)
        self.isr_shrinks = 0
        self.isr_expands = 0
        self._roles: dict[str, list[str]] = {}  # role changes not logged yet (role_taken)
        # connections holding answers of delayed Produces a moving high watermark just completed: each
        # writes them once the move has completed all it passed, in the same turn (one system call each)
        self.answered: set = set()
        # logs whose leader-epoch checkpoint is written but not yet durable -> the sync that makes it so
        self.unsynced_epochs: dict[Log, asyncio.Future] = {}
        self._next_sync: asyncio.Future | None = None  # the sync the checkpoints written now wait for
        self._syncing = False  # a task makes the checkpoints durable, one sync after the other
        self._isr_changes: list[tuple[Partition, PartitionState, PartitionState]] = []  # proposed this turn

    def write_answers(self) -> None:
        answered, self.answered = self.answered, set()
        for connection in answered:
            connection.write_answers()

    def epoch_checkpoint_unsynced(self, log_: Log) -> None:
        """A leader-epoch checkpoint written without fsync: it joins the next sync (group commit: every
        checkpoint written while one sync runs is made durable by the following one)."""
        if self._next_sync is None:
            self._next_sync = asyncio.get_running_loop().create_future()
        self.unsynced_epochs[log_] = self._next_sync
        if not self._syncing:
            self._syncing = True
            self.broker.supervisor.spawn(self._sync_epoch_checkpoints())

    async def _sync_epoch_checkpoints(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while self._next_sync is not None:
                batch, self._next_sync = self._next_sync, None
                while True:
                    try:
                        await loop.run_in_executor(None, sync_filesystem, self.broker.logs.log_dir)
                        break
                    except OSError as exc:  # its acknowledgements wait (bounded by their timeouts); again soon
                        log.error("could not make leader-epoch checkpoints durable: %s", exc)
                        await clock.sleep(1)
                for log_ in [k for k, f in self.unsynced_epochs.items() if f is batch]:
                    del self.unsynced_epochs[log_]
                batch.set_result(None)
        finally:
            self._syncing = False

    def role_taken(self, role: str, what: str) -> None:
        """A leadership taken or given up, logged with the others of the same moment in one line (a failover
        moves thousands at once)."""
        if not self._roles:
            clock.call_later(ROLE_SUMMARY_S, self._log_roles)
        self._roles.setdefault(role, []).append(what)

    def _log_roles(self) -> None:
        for role, changes in self._roles.items():
            log.info("%s of %d partition(s): %s%s", role, len(changes), ", ".join(changes[:10]),
                     ", ..." if len(changes) > 10 else "")
        self._roles = {}

    def on_append(self, topic: str, index: int) -> None:
        """Any append here (produce, markers, the coordinators' records): an ISR of one commits it at once."""
        partition = self.partitions.get((topic, index))
        if partition is not None and partition.is_leader:
            partition.maybe_advance_high_watermark()

    def partition(self, topic: str, index: int) -> Partition | None:
        """This broker's replica of the partition; None if it holds none."""
        found = self.partitions.get((topic, index))
        log_ = self.broker.logs.log(topic, index)
        if found is not None and found.log is log_:
            return found  # (not one of a deleted topic of the same name)
        if self.fetchers is not None:
            # a cluster's replicas take their roles from the store's states (apply_state: a leader's epoch
            # checkpoint, its followers, its coordinators); one whose state is not applied yet is not ready
            return None
        state = self.store.cache.partition_state(topic, index) if log_ is not None else None
        if state is None or self.node_id not in state.replicas:
            return None
        found = self.partitions[(topic, index)] = Partition(self, topic, index, log_, state)
        return found

    def leader_partition(self, topic: str, index: int) -> tuple[Partition | None, ErrorCode]:
        """The partition if this broker leads it, else the error a client gets."""
        partition = self.partition(topic, index)
        if partition is not None and partition.is_leader:
            return partition, ErrorCode.NONE  # the usual answer first: a fetch asks this of every partition it reads
        state = self.store.cache.partition_state(topic, index)
        if state is None:
            return None, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        return None, ErrorCode.LEADER_NOT_AVAILABLE if state.leader == NO_LEADER else ErrorCode.NOT_LEADER_OR_FOLLOWER

    # --- driven by the metadata store -------------------------------------------------------

    def apply_state(self, topic: str, index: int, state: PartitionState | None) -> None:
        """The store learned a partition's new state (None: the partition is gone)."""
        key = (topic, index)
        partition = self.partitions.get(key)
        if state is None or self.node_id not in state.replicas:
            if partition is not None:
                partition.apply(state or PartitionState(NO_LEADER, partition.leader_epoch + 1, (), ()))
                del self.partitions[key]
            if self.fetchers is not None:
                self.fetchers.remove(key)
            if state is not None:
                self._delete_replica(topic, index)
            return
        if partition is None:
            log_ = self.broker.logs.log(topic, index)
            if log_ is None:
                return
            if log_._high_watermark is None:
                # unknown after a start: the leader moves it up as followers fetch, a follower learns it
                log_.set_high_watermark(log_.log_start_offset)
            partition = self.partitions[key] = Partition(self, topic, index, log_, PartitionState(NO_LEADER, -1, (), ()))
        partition.apply(state)
        if self.fetchers is not None:
            if state.leader in (self.node_id, NO_LEADER):
                self.fetchers.remove(key)
            else:
                self.fetchers.add(key, partition, state.leader)

    def _delete_replica(self, topic: str, index: int) -> None:
        """Moved away (a reassignment, here or while this broker was down): its records go, as with
        Kafka's StopReplica(delete); the empty log stays for the topic's catalog entry."""
        log_ = self.broker.logs.log(topic, index)
        if log_ is not None and (log_.log_end_offset or log_.log_start_offset):
            self.broker.logs.truncate_fully_and_start_at(topic, index, 0)
            log.info("%s-%d: no longer a replica on this broker: deleted its records", topic, index)

    def change_isr(self, partition: Partition, isr: tuple[int, ...]) -> None:
        """Propose an ISR in the store (compare-and-swap on the state's version); it applies once written. The
        proposals of one turn of the event loop (a follower's fetch of thousands of partitions, the periodic
        shrink) go to etcd together, in batched transactions."""
        if partition.isr_change_pending or self.store is None:
            return
        partition.isr_change_pending = True
        current = partition.state
        proposed = current.with_isr(isr)
        # with every earlier proposal since the last state seen: a write whose answer was lost may have landed
        partition.proposed_isr = tuple(dict.fromkeys(partition.proposed_isr + proposed.isr))
        if not self._isr_changes:
            self.broker.supervisor.spawn(self._write_isr_changes())
        self._isr_changes.append((partition, current, proposed))

    async def _write_isr_changes(self) -> None:
        changes, self._isr_changes = self._isr_changes, []
        try:
            if self.expansion_delay_s:
                for partition, current, proposed in changes:
                    if set(proposed.isr) - set(current.isr):
                        log.warning("%s-%d: fault injection (%s): holding the ISR change to %s for %.1fs",
                                    partition.topic, partition.index, faults.DELAY_ISR_EXPANSION_ENV,
                                    list(proposed.isr), self.expansion_delay_s)
                await clock.sleep(self.expansion_delay_s)
            written = await self.store.alter_partitions([(p.topic, p.index, current, proposed)
                                                         for p, current, proposed in changes])
            for (partition, current, proposed), ok in zip(changes, written, strict=True):
                if ok:
                    log.info("%s-%d: ISR %s -> %s", partition.topic, partition.index, list(current.isr),
                             list(proposed.isr))
                else:  # the newer state the watch brings replaces the proposal (apply)
                    log.info("%s-%d: ISR change to %s lost a race with a newer state", partition.topic,
                             partition.index, list(proposed.isr))
        except Exception as exc:  # noqa: BLE001 -- etcd unreachable, written or not: proposed again later
            log.warning("ISR change of %d partition(s) failed (%s-%d first): %s", len(changes), changes[0][0].topic,
                        changes[0][0].index, exc)
        finally:
            for partition, _, _ in changes:
                partition.isr_change_pending = False
                # a follower's fetch that came while this was pending proposed nothing (change_isr), and an
                # idle follower's session names the partition no more: it looks at it again now
                partition.log.notify_watchers()

    def shrink_isrs(self) -> None:
        """The leader's periodic check: drop followers that have not caught up within replica.lag.time.max.ms;
        to an ISR short of a replica, add a follower that is caught up and fetching."""
        max_lag = self.broker.config["replica.lag.time.max.ms"]
        for partition in list(self.partitions.values()):
            if not partition.is_leader:
                continue
            lagging = partition.lagging_isr_members(max_lag)
            if lagging:
                self.change_isr(partition, tuple(r for r in partition.state.isr if r not in lagging))
            elif len(partition.state.isr) < len(partition.state.replicas):
                partition.maybe_expand_isr(max_lag)
