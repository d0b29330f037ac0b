"""Share groups (KIP-932, Queues for Kafka): membership, share partitions, their durable state."""

from __future__ import annotations

import logging

from storage import clock

from .coordinator import ShareGroupCoordinator
from .manager import SWEEP_INTERVAL_S, SharePartitionManager
from .persister import SharePersister

log = logging.getLogger("moldau.share")

SHARE_VERSION = 1  # the share.version feature level served (KIP-932's share groups, Kafka 4.1+)


class ShareGroups:
    """What a broker keeps of share groups: ``groups`` (the coordinator's side), ``partitions`` (the leader's)."""

    def __init__(self, broker) -> None:
        self.persister = SharePersister(broker)
        self.groups = ShareGroupCoordinator(broker)
        self.partitions = SharePartitionManager(broker, self.persister)
        self.configs = broker.group_configs

    def group_config(self, group_id: str, name: str):
        """A group config of a share group: its own value, else the broker's default (Kafka's GroupConfig)."""
        return self.configs.value(group_id, name)

    async def run_timers(self) -> None:
        """Fence members whose session timed out and release records whose acquisition lock did; a
        long-lived task of the broker (to run under its supervisor)."""
        while True:
            await clock.sleep(SWEEP_INTERVAL_S)
            now = clock.wall_ms()
            try:
                self.groups.expire_members(now)
                self.partitions.expire_locks(now)
            except Exception:  # one bad round must not end the timers (until the supervisor restarts them)
                log.exception("share group timers")
