"""The controller: one broker, elected through etcd, that elects partition leaders.

Election is etcd's: the first broker to create ``/controller`` under its
session lease is the controller until that lease ends; the others watch the
key and try again when it goes. The controller reacts to brokers leaving and
joining: a partition whose leader is gone gets the first live in-sync replica
in replica order as leader, with the leader epoch bumped; with none left it
goes offline (leader -1, ISR kept, so the last in-sync replica is elected when
it returns) unless unclean.leader.election.enable lets a live out-of-sync
replica take over. Dead followers leave the ISR at once. Every write is a
compare-and-swap on the state the decision was made from. It also deletes
partition states that no topic key counts once no create claims their topic:
what a broker that died mid-create left.
"""

from __future__ import annotations

import asyncio
import json
import logging

from storage import clock

from .metadata import NO_LEADER, PartitionState

log = logging.getLogger("moldau.controller")

PREFERRED, UNCLEAN = 0, 1  # ElectLeaders' election types


def requested_election(state: PartitionState, live: set[int], election_type: int) -> tuple[PartitionState | None, str]:
    """ElectLeaders for one partition: (its new state, "") or (None, why not: the error's name)."""
    live_isr = [r for r in state.isr if r in live]
    if election_type == PREFERRED:
        preferred = state.replicas[0]
        if state.leader == preferred:
            return None, "ELECTION_NOT_NEEDED"
        if preferred not in live_isr:
            return None, "PREFERRED_LEADER_NOT_AVAILABLE"
        return state.with_leader(preferred, live_isr), ""
    if state.leader in live:
        return None, "ELECTION_NOT_NEEDED"
    candidates = [r for r in state.replicas if r in live_isr] or [r for r in state.replicas if r in live]
    if not candidates:
        return None, "ELIGIBLE_LEADERS_NOT_AVAILABLE"
    clean = candidates[0] in live_isr
    return state.with_leader(candidates[0], live_isr if clean else [candidates[0]], unclean=not clean), ""


class Controller:
    def __init__(self, store) -> None:
        self.store = store
        self._wake = asyncio.Event()

    @property
    def node_id(self) -> int:
        return self.store.broker.node_id

    @property
    def active(self) -> bool:
        return self.store.cache.controller_id == self.node_id

    # events from the store's watch
    def brokers_changed(self) -> None:
        self._wake.set()

    def controller_changed(self) -> None:
        self._wake.set()

    def session_renewed(self) -> None:
        self._wake.set()

    def configs_changed(self) -> None:  # unclean.leader.election.enable may elect an offline partition's leader
        self._wake.set()

    def resynced(self) -> None:  # the view was read again after a watch break: look at all of it
        self._wake.set()

    def topic_claim_released(self) -> None:  # partition states of a write that did not finish may be left
        self._wake.set()

    def partition_changed(self, topic: str, index: int, state: PartitionState) -> None:
        if self.active and (state.leader == NO_LEADER or state.leader not in self.store.cache.brokers
                            or state.adding or state.removing):
            self._wake.set()

    async def rebalance_leaders(self) -> None:
        """auto.leader.rebalance.enable: every leader.imbalance.check.interval.seconds, the controller makes
        each partition's preferred replica (the first) its leader again where it is in sync."""
        config = self.store.broker.config
        while True:
            await clock.sleep(config["leader.imbalance.check.interval.seconds"])
            if not (self.active and config["auto.leader.rebalance.enable"]):
                continue
            live = set(self.store.cache.brokers)
            changes = []
            for (topic, index), state in list(self.store.cache.partitions.items()):
                new, _ = requested_election(state, live, PREFERRED)
                if new is not None:
                    changes.append((topic, index, state, new))
            await self._write(changes, "preferred replica election")

    async def run(self) -> None:
        self._wake.set()
        while True:
            await self._wake.wait()
            self._wake.clear()
            try:
                if self.store.cache.controller_id == NO_LEADER:
                    await self._try_to_become_controller()
                if self.active:
                    await self._elect_where_needed()
                    await self.store.drop_orphan_partitions()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 -- etcd away or a lost race: look again shortly
                log.warning("controller pass failed: %s", exc)
                await clock.sleep(0.5)
                self._wake.set()

    async def _try_to_become_controller(self) -> None:
        client, tx = self.store.client, self.store.client.transactions
        key = self.store.key("controller")
        ok, _ = await client.transaction(
            compare=[tx.version(key) == 0],
            success=[tx.put(key, json.dumps({"broker_id": self.node_id}).encode(), lease=self.store.lease)],
            failure=[])
        if ok:
            self.store.cache.controller_id = self.node_id
            log.info("broker %d is the controller", self.node_id)

    def _unclean_allowed(self, topic: str) -> bool:
        metadata = self.store.topics.get(topic)
        default = str(self.store.broker.config["unclean.leader.election.enable"]).lower()
        return (metadata.configs if metadata else {}).get("unclean.leader.election.enable", default) == "true"

    def decide(self, topic: str, index: int, state: PartitionState, live: set[int]) -> PartitionState | None:
        """The state a partition should move to with brokers ``live``; None if it is fine as it is."""
        live_isr = [r for r in state.isr if r in live]
        if state.leader in live:
            if len(live_isr) < len(state.isr):
                return state.with_isr(live_isr)
            return state.reassignment_done()
        candidates = [r for r in state.replicas if r in live_isr]
        if candidates:
            return state.with_leader(candidates[0], live_isr)
        if self._unclean_allowed(topic):
            alive = [r for r in state.replicas if r in live]
            if alive:
                log.warning("%s-%d: unclean leader election: no in-sync replica of %s is alive; electing "
                            "out-of-sync replica %d, which loses what it had not replicated", topic, index,
                            list(state.isr), alive[0])
                return state.with_leader(alive[0], [alive[0]], unclean=True)
        if state.leader == NO_LEADER:
            return None
        log.warning("%s-%d: no in-sync replica of %s is alive; the partition is offline", topic, index,
                    list(state.isr))
        return state.with_leader(NO_LEADER, state.isr)

    async def _elect_where_needed(self) -> None:
        live = set(self.store.cache.brokers)
        changes = []
        for (topic, index), state in list(self.store.cache.partitions.items()):
            new = self.decide(topic, index, state, live)
            if new is not None:
                changes.append((topic, index, state, new))
        await self._write(changes, "brokers left or joined")

    async def hand_over_leadership(self, node_id: int) -> None:
        """Controlled shutdown: every partition ``node_id`` leads gets another in-sync leader, and it leaves
        the ISRs it follows in, so acks=all writes stop waiting for it."""
        live = set(self.store.cache.brokers) - {node_id}
        changes = []
        for (topic, index), state in list(self.store.cache.partitions.items()):
            if node_id not in state.isr:
                continue
            isr = [r for r in state.isr if r != node_id]
            if state.leader != node_id:
                new = state.with_isr(isr)
            else:
                candidates = [r for r in state.replicas if r in isr and r in live]
                if not candidates:
                    continue  # the only in-sync replica: it stays leader until it is gone
                new = state.with_leader(candidates[0], isr)
            changes.append((topic, index, state, new))
        await self._write(changes, f"controlled shutdown of broker {node_id}")

    async def _write(self, changes: list, why: str) -> None:
        """Partition state changes, batched (store.alter_partitions), logged as one summary: one line per
        partition would be thousands at scale."""
        if not changes:
            return
        written = await self.store.alter_partitions(changes)
        done = [change for change, ok in zip(changes, written, strict=True) if ok]
        moved = [(t, i, new) for t, i, old, new in done if old.leader != new.leader]
        sample = ", ".join(f"{t}-{i}: {new.leader}" for t, i, new in moved[:5])
        log.info("%s: %d partition state(s) written (%d new leader(s)%s%s), %d lost a race with a newer state",
                 why, len(done), len(moved), ": " if moved else "", sample + (", ..." if len(moved) > 5 else ""),
                 len(changes) - len(done))
