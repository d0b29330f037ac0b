"""Cluster-wide settings in etcd: topic configs (in the topic key ``/topics/<name>``), client quotas
(``/client_quotas/<entity>``), dynamic broker configs (``/configs/brokers/<id or <default>>``) and group
configs (``/configs/groups/<group>``).

A change is written with compare-and-swap before the request is answered, and every broker (the writer
too) applies it from the watch through ``EtcdMetadataStore._apply``, so any broker answers the same
DescribeConfigs / DescribeClientQuotas and every leader enforces the same limits.
"""

from __future__ import annotations

import json
import logging
from urllib.parse import quote, unquote

from broker.config.dynamic_configs import DEFAULT_ENTITY
from broker.network.client_quotas import Entity, altered
from storage import clock
from storage.errors import InvalidConfig, UnknownTopic

from .etcd_topics import CREATING
from .metadata import TopicChangeInProgress

log = logging.getLogger("moldau.etcd")

ATTEMPTS = 5  # compare-and-swap rounds lost to concurrent writers before the request is told to retry
CLIENT_QUOTAS = "client_quotas"
CONFIGS = "configs"  # /configs/brokers/<node id or <default>>, /configs/groups/<group id, percent-encoded>


def quota_key_name(entity: Entity) -> str:
    """``client-id=<default>,user=alice``: the entity's types and names (percent-encoded, so that no name is
    ``<default>``) in its order."""
    return ",".join(f"{kind}={DEFAULT_ENTITY if name is None else quote(name, safe='')}" for kind, name in entity)


def quota_entity(key_name: str) -> Entity:
    items = (part.partition("=") for part in key_name.split(","))
    return tuple(sorted(((kind, None if name == DEFAULT_ENTITY else unquote(name)) for kind, _, name in items),
                        key=lambda item: item[0]))


class EtcdConfigs:
    def __init__(self, store) -> None:
        self.store = store
        quotas = store.broker.quotas
        if quotas.values:  # etcd's replace them as the watch brings them
            log.warning("client quotas in %s are not used in a cluster: they are kept in etcd", quotas.path)
            quotas.values.clear()
        groups = store.broker.group_configs
        if groups.path.exists():
            log.warning("group configs in %s are not used in a cluster: they are kept in etcd", groups.path)

    @property
    def broker(self):
        return self.store.broker

    # --- topic configs ----------------------------------------------------------------------------

    async def alter_topic_configs(self, name: str, change, validate_only: bool) -> dict[str, str]:
        """CAS on the topic key's mod revision, while no create or growth of the topic holds its claim."""
        client, tx = self.store.client, self.store.client.transactions
        key, claim = self.store.key("topics", name), self.store.key(CREATING, name)
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
        self.store.configs_changed()

    # --- client quotas ----------------------------------------------------------------------------

    async def alter_client_quotas(self, changes: list[tuple[Entity, list[dict]]]) -> None:
        """One transaction over every entity's key, each compared with the mod revision its values were
        read at; then until this broker's watch has applied it, so its next DescribeClientQuotas has it."""
        client, tx = self.store.client, self.store.client.transactions
        merged: dict[Entity, list[dict]] = {}
        for entity, ops in changes:
            merged.setdefault(entity, []).extend(ops)
        keys = {entity: self.store.key(CLIENT_QUOTAS, quota_key_name(entity)) for entity in merged}
        for _ in range(ATTEMPTS):
            compare, writes, wanted = [], [], {}
            for entity, ops in merged.items():
                found = await client.get(keys[entity])
                values = altered(entity, ops, json.loads(found.value)["values"] if found is not None else {})
                compare.append(tx.mod(keys[entity]) == found.mod_revision if found is not None
                               else tx.version(keys[entity]) == 0)
                if values:
                    writes.append(tx.put(keys[entity], json.dumps(
                        {"entity": [list(item) for item in entity], "values": values}).encode()))
                elif found is not None:
                    writes.append(tx.delete(keys[entity]))
                wanted[entity] = values
            if not writes:
                return
            ok, _ = await client.transaction(compare=compare, success=writes, failure=[])
            if ok:
                quotas = self.broker.quotas
                await self._until(lambda quotas=quotas, wanted=wanted: all(quotas.values.get(e, {}) == v
                                                                    for e, v in wanted.items()))
                return
        raise TimeoutError("the client quotas kept changing under this request; retry")

    def apply_client_quota(self, key_name: str, value: bytes | None) -> None:
        values = json.loads(value)["values"] if value is not None else {}
        if not isinstance(values, dict) or not all(isinstance(v, (int, float)) for v in values.values()):
            raise ValueError("quota values are not numbers by name")
        self.broker.quotas.set(quota_entity(key_name), values)

    @staticmethod
    async def _until(applied, timeout_s: float = 5.0) -> None:
        """Until the watch has brought a write of this broker's here (bounded: etcd has it either way)."""
        for _ in range(int(timeout_s / 0.05)):
            if applied():
                return
            await clock.sleep(0.05)

    async def _alter_configs(self, key: bytes, change, validate_only: bool, in_force, what: str) -> None:
        """CAS of a ``{name: value}`` key on its mod revision (version 0 if absent; an empty set deletes it),
        then until this broker's watch has applied it (``in_force()`` equals it)."""
        client, tx = self.store.client, self.store.client.transactions
        for _ in range(ATTEMPTS):
            found = await client.get(key)
            wanted = change(json.loads(found.value) if found is not None else {})
            if validate_only:
                return
            guard = tx.mod(key) == found.mod_revision if found is not None else tx.version(key) == 0
            write = tx.put(key, json.dumps(wanted, sort_keys=True).encode()) if wanted else tx.delete(key)
            ok, _ = await client.transaction(compare=[guard], success=[write], failure=[])
            if ok:
                await self._until(lambda wanted=wanted: in_force() == wanted)
                return
        raise TimeoutError(f"the {what} kept changing under this request; retry")

    # --- dynamic broker configs -------------------------------------------------------------------

    async def alter_broker_configs(self, entity: str, change, validate_only: bool) -> None:
        """An entity without dynamic configs has no key."""
        configs = self.broker.broker_configs
        await self._alter_configs(self.store.key(CONFIGS, "brokers", entity), change, validate_only,
                                  lambda: configs.entities.get(entity, {}), "broker configs")

    def apply_broker_configs(self, entity: str, value: bytes | None) -> None:
        self.broker.broker_configs.set(entity, json.loads(value) if value is not None else {})

    # --- group configs ----------------------------------------------------------------------------

    async def alter_group_configs(self, group_id: str, change, validate_only: bool) -> None:
        """A group without configs of its own has no key."""
        configs = self.broker.group_configs
        await self._alter_configs(self.store.key(CONFIGS, "groups", quote(group_id, safe="")), change,
                                  validate_only, lambda: configs.groups.get(group_id, {}), "group's configs")

    def apply_group_configs(self, key_name: str, value: bytes | None) -> None:
        self.broker.group_configs.set(unquote(key_name), json.loads(value) if value is not None else {})
