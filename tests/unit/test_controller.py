"""The controller's decisions (broker/cluster/controller.py) on partition states, with no etcd: who leads
when brokers come and go, how the ISR shrinks, when an unclean election is allowed, preferred elections,
reassignments and controlled shutdown."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from broker.cluster.controller import PREFERRED, UNCLEAN, Controller, requested_election
from broker.cluster.metadata import NO_LEADER, MetadataCache, PartitionState

from .conftest import run


class Store:
    """What the controller reads of the metadata store, and the writes it asks for (all succeed)."""

    def __init__(self, node_id: int = 1, brokers=(1, 2, 3), unclean: bool = False, topic_configs=None):
        self.broker = SimpleNamespace(node_id=node_id, config={
            "unclean.leader.election.enable": unclean, "leader.imbalance.check.interval.seconds": 300,
            "auto.leader.rebalance.enable": True})
        self.cache = MetadataCache(brokers={b: object() for b in brokers}, controller_id=node_id)
        self.topics = {name: SimpleNamespace(configs=configs) for name, configs in (topic_configs or {}).items()}
        self.written: list[tuple] = []

    async def alter_partitions(self, changes):
        self.written.extend(changes)
        for topic, index, _, new in changes:
            self.cache.partitions[(topic, index)] = new
        return [True] * len(changes)

    async def drop_orphan_partitions(self):
        pass


def state(leader, isr, replicas=(1, 2, 3), epoch=5, **kw) -> PartitionState:
    return PartitionState(leader, epoch, tuple(isr), tuple(replicas), **kw)


def decide(old: PartitionState, live, **store_kw) -> PartitionState | None:
    return Controller(Store(**store_kw)).decide("t", 0, old, set(live))


# --- brokers leaving and joining --------------------------------------------------------------------

def test_a_partition_whose_leader_and_isr_are_alive_is_left_alone():
    assert decide(state(1, (1, 2, 3)), {1, 2, 3}) is None


def test_a_dead_follower_leaves_the_isr_at_once_without_a_new_epoch():
    new = decide(state(1, (1, 2, 3)), {1, 3})
    assert new.leader == 1 and new.isr == (1, 3) and new.leader_epoch == 5


def test_a_dead_leader_is_replaced_by_the_first_live_in_sync_replica_in_replica_order():
    new = decide(state(1, (3, 2, 1), replicas=(1, 2, 3)), {2, 3})
    assert new.leader == 2, "replica order, not ISR order, decides"
    assert set(new.isr) == {2, 3}


def test_a_new_leader_bumps_the_leader_epoch():
    assert decide(state(1, (1, 2)), {2}).leader_epoch == 6


def test_an_out_of_sync_live_replica_is_not_elected_by_default():
    new = decide(state(1, (1,)), {2, 3})
    assert new.leader == NO_LEADER and new.isr == (1,), "offline, ISR kept for the last in-sync replica"
    assert new.leader_epoch == 6


def test_an_offline_partition_stays_as_it_is_while_nothing_changes():
    assert decide(state(NO_LEADER, (1,), epoch=6), {2, 3}) is None


def test_the_last_in_sync_replica_coming_back_leads_again():
    new = decide(state(NO_LEADER, (1,), epoch=6), {1, 2, 3})
    assert new.leader == 1 and new.isr == (1,) and new.leader_epoch == 7


def test_unclean_election_takes_the_first_live_replica_and_an_isr_of_it_alone():
    new = decide(state(1, (1,)), {2, 3}, unclean=True)
    assert new.leader == 2 and new.isr == (2,) and new.unclean


def test_unclean_election_is_a_topic_config_over_the_broker_default():
    on = decide(state(1, (1,)), {3}, topic_configs={"t": {"unclean.leader.election.enable": "true"}})
    off = decide(state(1, (1,)), {3}, unclean=True, topic_configs={"t": {"unclean.leader.election.enable": "false"}})
    assert on.leader == 3 and on.unclean
    assert off.leader == NO_LEADER


def test_a_clean_candidate_wins_over_unclean_election():
    new = decide(state(1, (1, 3)), {2, 3}, unclean=True)
    assert new.leader == 3 and not new.unclean


def test_with_no_replica_alive_unclean_election_leaves_the_partition_offline():
    assert decide(state(1, (1,), replicas=(1, 2)), {3}, unclean=True).leader == NO_LEADER


def test_an_isr_change_clears_the_unclean_flag():
    assert not state(2, (2, 3), unclean=True).with_isr((2, 3)).unclean


# --- ElectLeaders ---------------------------------------------------------------------------------

def test_preferred_election_moves_leadership_to_the_first_replica_when_in_sync():
    new, error = requested_election(state(2, (1, 2, 3)), {1, 2, 3}, PREFERRED)
    assert error == "" and new.leader == 1 and new.leader_epoch == 6


def test_preferred_election_is_not_needed_when_the_preferred_replica_leads():
    assert requested_election(state(1, (1, 2, 3)), {1, 2, 3}, PREFERRED) == (None, "ELECTION_NOT_NEEDED")


@pytest.mark.parametrize("isr,live", [((2, 3), {1, 2, 3}), ((1, 2, 3), {2, 3})])
def test_preferred_election_needs_the_preferred_replica_alive_and_in_sync(isr, live):
    assert requested_election(state(2, isr), live, PREFERRED) == (None, "PREFERRED_LEADER_NOT_AVAILABLE")


def test_unclean_election_request_is_not_needed_while_the_leader_lives():
    assert requested_election(state(2, (2,)), {1, 2}, UNCLEAN) == (None, "ELECTION_NOT_NEEDED")


def test_unclean_election_request_prefers_an_in_sync_replica():
    new, _ = requested_election(state(1, (1, 3)), {2, 3}, UNCLEAN)
    assert new.leader == 3 and not new.unclean and new.isr == (3,)


def test_unclean_election_request_elects_an_out_of_sync_replica():
    new, _ = requested_election(state(1, (1,)), {2, 3}, UNCLEAN)
    assert new.leader == 2 and new.unclean and new.isr == (2,)


def test_unclean_election_request_without_a_live_replica():
    assert requested_election(state(1, (1,), replicas=(1, 2)), {3}, UNCLEAN) == (
        None, "ELIGIBLE_LEADERS_NOT_AVAILABLE")


# --- reassignment (KIP-455) -----------------------------------------------------------------------

def test_a_reassignment_adds_the_new_replicas_out_of_sync_until_they_catch_up():
    moving = state(1, (1, 2), replicas=(1, 2)).reassigned([2, 3])
    assert moving.replicas == (2, 3, 1) and moving.adding == (3,) and moving.removing == (1,)
    assert moving.reassignment_done() is None, "3 is not in sync yet"


def test_a_reassignment_completes_once_the_adding_replicas_are_in_sync_and_moves_the_leader():
    moving = state(1, (1, 2, 3), replicas=(1, 2)).reassigned([2, 3])
    done = moving.reassignment_done()
    assert done.replicas == (2, 3) and done.isr == (2, 3) and done.leader == 2
    assert done.leader_epoch == moving.leader_epoch + 1 and not done.adding and not done.removing


def test_the_controller_finishes_a_reassignment_whose_replicas_caught_up():
    moving = state(2, (1, 2, 3), replicas=(1, 2)).reassigned([2, 3])
    new = decide(moving, {1, 2, 3})
    assert new.replicas == (2, 3) and new.leader == 2 and new.leader_epoch == moving.leader_epoch


def test_a_cancelled_reassignment_goes_back_to_the_original_replicas():
    moving = state(3, (1, 3), replicas=(1, 2)).reassigned([3])
    back = moving.reassignment_cancelled()
    assert back.replicas == (1, 2) and back.isr == (1,) and back.leader == 1


def test_a_partition_state_survives_its_etcd_encoding():
    original = state(2, (2, 3), unclean=True).reassigned([3, 4])
    assert PartitionState.decode(original.encode(), 17) == PartitionState(
        original.leader, original.leader_epoch, original.isr, original.replicas, 17, True, original.adding,
        original.removing)


# --- controlled shutdown and preferred rebalancing ------------------------------------------------

def test_controlled_shutdown_moves_leadership_and_leaves_the_isrs():
    store = Store()
    store.cache.partitions = {("t", 0): state(1, (1, 2, 3)), ("t", 1): state(2, (1, 2)),
                              ("t", 2): state(1, (1,)), ("t", 3): state(3, (3, 2))}
    run(Controller(store).hand_over_leadership(1))
    parts = store.cache.partitions
    assert parts[("t", 0)].leader == 2 and parts[("t", 0)].isr == (2, 3)
    assert parts[("t", 1)].leader == 2 and parts[("t", 1)].isr == (2,) and parts[("t", 1)].leader_epoch == 5
    assert parts[("t", 2)].leader == 1, "the only in-sync replica stays leader until it is gone"
    assert {(t, i) for t, i, _, _ in store.written} == {("t", 0), ("t", 1)}


def test_the_leader_rebalance_runs_every_check_interval_by_the_clock(fake_clock):
    store = Store()
    store.cache.partitions = {("t", 0): state(2, (1, 2, 3)), ("t", 1): state(1, (1, 2))}

    async def main():
        task = asyncio.ensure_future(Controller(store).rebalance_leaders())
        await fake_clock.run_for(299)
        assert store.written == []
        await fake_clock.run_for(1)
        task.cancel()

    run(main())
    assert [(t, i, new.leader) for t, i, _, new in store.written] == [("t", 0, 1)]


def test_the_leader_rebalance_is_only_the_active_controllers(fake_clock):
    store = Store(node_id=2)
    store.cache.controller_id = 1
    store.cache.partitions = {("t", 0): state(2, (1, 2, 3))}

    async def main():
        task = asyncio.ensure_future(Controller(store).rebalance_leaders())
        await fake_clock.run_for(900)
        task.cancel()

    run(main())
    assert store.written == []


def test_the_elections_after_brokers_left_are_written_in_one_batch():
    store = Store()
    store.cache.brokers = {2: object(), 3: object()}
    store.cache.partitions = {("t", 0): state(1, (1, 2)), ("t", 1): state(2, (1, 2)), ("t", 2): state(3, (3,))}
    run(Controller(store)._elect_where_needed())
    assert {(t, i): (n.leader, n.isr) for t, i, _, n in store.written} == {("t", 0): (2, (2,)), ("t", 1): (2, (2,))}
