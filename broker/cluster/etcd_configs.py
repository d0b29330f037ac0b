"""Cluster-wide settings in etcd: topic configs (in the topic key ``/topics/<name>``), client quotas
(``/client_quotas/<entity>``) and dynamic broker configs (``/configs/brokers/<id or <default>>``).

A change is written with compare-and-swap before the request is answered, and every broker (the writer
too) applies it from the watch through ``EtcdMetadataStore._apply``, so any broker answers the same
DescribeConfigs / DescribeClientQuotas and every leader enforces the same limits.
"""

from __future__ import annotations

import json
import logging

from storage.errors import InvalidConfig, UnknownTopic

from . import etcd_store
from .metadata import TopicChangeInProgress

log = logging.getLogger("moldau.etcd")

ATTEMPTS = 5  # compare-and-swap rounds lost to concurrent writers before the request is told to retry


class EtcdConfigs:
    def __init__(self, store) -> None:
        self.store = store

    @property
    def broker(self):
        return self.store.broker

    # --- topic configs ----------------------------------------------------------------------------

    async def alter_topic_configs(self, name: str, change, validate_only: bool) -> dict[str, str]:
        """CAS on the topic key's mod revision, while no create or growth of the topic holds its claim."""
        client, tx = self.store.client, self.store.client.transactions
        key, claim = self.store.key("topics", name), self.store.key(etcd_store.CREATING, name)
        for _ in range(ATTEMPTS):
            found = await client.get(key)
            if found is None:
                raise UnknownTopic(f"unknown topic {name!r}")
            topic = json.loads(found.value)
            wanted = change(dict(topic["configs"]))
            if validate_only:
                return wanted
            topic["configs"] = wanted
            ok, _ = await client.transaction(compare=[tx.mod(key) == found.mod_revision, tx.version(claim) == 0],
                                             success=[tx.put(key, json.dumps(topic).encode())], failure=[])
            if ok:
                await self.store.apply_current(key)
                return wanted
            if await client.get(claim) is not None:
                break
        raise TopicChangeInProgress(f"topic {name!r} is being changed by another request; retry")

    def apply_topic_configs(self, name: str, configs: dict[str, str]) -> None:
        """The topic key's configs into the local catalog and logs (a leader enforces them from its next
        append on); the controller looks again, as unclean.leader.election.enable may elect."""
        local = self.broker.logs.topic(name)
        if local is None or local.configs == configs:
            return
        try:
            self.broker.logs.alter_topic_configs(name, configs)
        except InvalidConfig as exc:  # written by a broker of another version: keep what is in force
            log.error("topic %s: configs %s from etcd not applied: %s", name, configs, exc)
            return
        log.info("topic %s: configs now %s", name, configs or "default")
        self.store.controller.configs_changed()
