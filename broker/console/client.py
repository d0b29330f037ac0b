"""The console's admin client: the project's AdminClient, refusing every request that changes something unless
the console was started with --allow-writes, and counting the requests it sends (the footer's and /stats'
figures: what an open page costs the cluster). Also the few reads the admin client has no helper for."""

from __future__ import annotations

import time
from collections import Counter, deque
from dataclasses import dataclass

from ..admin.client import CONFIG_TOPIC, GROUP_KEY, AdminClient, AdminError, Broker, KafkaError, check
from ..errors import ErrorCode

# Requests that only read. Anything else (WriteTxnMarkers, the console's one write) needs --allow-writes.
READS = frozenset({
    "ApiVersions", "Metadata", "DescribeCluster", "FindCoordinator", "ListOffsets", "Fetch", "DescribeConfigs",
    "DescribeLogDirs", "ListGroups", "DescribeGroups", "ConsumerGroupDescribe", "ShareGroupDescribe", "OffsetFetch",
    "DescribeShareGroupOffsets", "DescribeAcls", "DescribeUserScramCredentials", "ListTransactions",
    "DescribeTransactions", "DescribeProducers",
})
_WINDOW_S = 60.0
# How long a leader or coordinator the cluster named is taken as still true: the admin client's helpers ask
# again for each partition (describe_producers, send_to_leader) and each group request.
LEADER_TTL_S = 2.0
METADATA_TTL_S = 1.0  # the same Metadata asked again within a page's gathering (list_offsets asks its own)
COORDINATOR_TTL_S = 10.0


@dataclass
class GroupSummary:
    """A group in the groups list: its state, member count, committed offsets (classic and KIP-848 groups), its
    total lag as the broker counts it (share groups: records not yet acknowledged), and an error code or 0."""
    state: str
    members: int
    committed: dict[tuple[str, int], int]
    share_lag: int | None
    error: int


class ReadOnly(AdminError):
    """A request that would change something, from a console started without --allow-writes."""


class ConsoleClient(AdminClient):
    def __init__(self, *args, allow_writes: bool = False, **kwargs):
        super().__init__(*args, **kwargs)
        self.allow_writes = allow_writes
        self.sent: Counter = Counter()  # API name -> requests since start
        self._recent: deque[float] = deque()  # send times within the last minute
        self._metadata: dict[tuple | None, tuple[object, float]] = {}  # topics asked -> (answer, when)
        self._leaders: dict[tuple[str, int], tuple[int, float]] = {}  # (topic, partition) -> (leader, when)
        self._coordinators: dict[tuple[int, str], tuple[object, float]] = {}

    async def send_versioned(self, api, body, node=None):
        # every request but ApiVersions comes through here, before any connection is made
        if api not in READS and not self.allow_writes:
            raise ReadOnly(f"{api} changes the cluster; the console was started without --allow-writes")
        return await super().send_versioned(api, body, node)

    async def _roundtrip(self, address, api, version, body):
        self.sent[api] += 1
        now = time.monotonic()
        self._recent.append(now)
        while self._recent and self._recent[0] < now - _WINDOW_S:
            self._recent.popleft()
        return await super()._roundtrip(address, api, version, body)

    async def metadata(self, topics=None):
        key = None if topics is None else tuple(sorted(topics))
        meta, when = self._metadata.get(key, (None, 0.0))
        if meta is not None and time.monotonic() - when < METADATA_TTL_S:
            return meta
        meta = await super().metadata(topics)
        now = time.monotonic()
        self._metadata = {k: v for k, v in self._metadata.items() if now - v[1] < METADATA_TTL_S}
        self._metadata[key] = (meta, now)
        for t in meta.topics.values():
            for p in t.partitions.values():
                self._leaders[(t.name, p.partition)] = (p.leader, now)
        return meta

    async def leader(self, topic: str, partition: int) -> int:
        leader, when = self._leaders.get((topic, partition), (-1, 0.0))
        if leader >= 0 and time.monotonic() - when < LEADER_TTL_S:
            return leader
        return await super().leader(topic, partition)

    async def coordinator(self, key_type: int, key: str):
        found, when = self._coordinators.get((key_type, key), (None, 0.0))
        if found is None or time.monotonic() - when >= COORDINATOR_TTL_S:
            found = await super().coordinator(key_type, key)
            self._coordinators[(key_type, key)] = (found, time.monotonic())
        return found

    def requests_last_minute(self) -> int:
        while self._recent and self._recent[0] < time.monotonic() - _WINDOW_S:
            self._recent.popleft()
        return len(self._recent)

    async def topic_configs(self, topics: list[str], keys: list[str] | None = None) -> dict[str, dict[str, dict]]:
        """Many topics' configs in one DescribeConfigs: topic -> name -> entry; a topic whose configs the
        principal may not describe is left out."""
        if not topics:
            return {}
        answer = await self.send("DescribeConfigs", {
            "resources": [{"resource_type": CONFIG_TOPIC, "resource_name": t, "configuration_keys": keys}
                          for t in topics], "include_synonyms": False, "include_documentation": False})
        return {r["resource_name"]: {c["name"]: c for c in r["configs"]}
                for r in answer["results"] if not r["error_code"]}

    async def log_dir_sizes(self, nodes: list[int]) -> dict[tuple[str, int, int], int]:
        """(topic, partition, node) -> bytes, from each broker's DescribeLogDirs (brokers that refuse are left out)."""
        sizes = {}
        for node in nodes:
            try:
                answer = await self.send("DescribeLogDirs", {"topics": None}, node)
            except AdminError:
                continue
            if answer.get("error_code"):
                continue
            for result in answer["results"]:
                for t in result["topics"] if not result["error_code"] else ():
                    for p in t["partitions"]:
                        if not p["is_future_key"]:
                            sizes[(t["name"], p["partition_index"], node)] = p["partition_size"]
        return sizes

    async def group_coordinators(self, group_ids: list[str]) -> dict[str, Broker]:
        """Each group's coordinator: from the cache, or one FindCoordinator for all the others (v4 batches
        keys; an older broker is asked once per group). Groups whose coordinator is not found are left out."""
        now = time.monotonic()
        missing = [g for g in group_ids
                   if now - self._coordinators.get((GROUP_KEY, g), (None, 0.0))[1] >= COORDINATOR_TTL_S]
        if missing:
            def body(version: int) -> dict:
                if version >= 4:
                    return {"key_type": GROUP_KEY, "coordinator_keys": missing}
                return {"key_type": GROUP_KEY, "key": missing[0]}

            version, answer = await self.send_versioned("FindCoordinator", body)
            found = answer["coordinators"] if version >= 4 else [{**answer, "key": missing[0]}]
            for c in found:
                if not c["error_code"]:
                    broker = self.brokers.setdefault(c["node_id"], Broker(c["node_id"], c["host"], c["port"]))
                    self._coordinators[(GROUP_KEY, c["key"])] = (broker, now)
            for g in missing[1:] if version < 4 else ():
                try:
                    await self.coordinator(GROUP_KEY, g)
                except KafkaError:
                    pass
        return {g: self._coordinators[(GROUP_KEY, g)][0] for g in group_ids if (GROUP_KEY, g) in self._coordinators}

    async def describe_groups(self, types: dict[str, str]) -> dict[str, GroupSummary]:
        """Many groups at once, for the groups list, by type (group -> classic, consumer or share, as ListGroups
        tells): per coordinator a DescribeGroups of the classic ones, a ConsumerGroupDescribe of the KIP-848 ones
        and an OffsetFetch of both (v8 batches groups; before it, one request per group); a ShareGroupDescribe
        and a DescribeShareGroupOffsets of the share ones."""
        coordinators = await self.group_coordinators(sorted(types))
        results = {g: GroupSummary("", 0, {}, None, ErrorCode.COORDINATOR_NOT_AVAILABLE)
                   for g in types if g not in coordinators}
        by_node: dict[int, dict[str, list[str]]] = {}
        for g, broker in coordinators.items():
            by_node.setdefault(broker.node_id, {}).setdefault(types[g], []).append(g)
        for node, kinds in by_node.items():
            described = []
            for kind, api in (("classic", "DescribeGroups"), ("consumer", "ConsumerGroupDescribe"),
                              ("share", "ShareGroupDescribe")):
                if kinds.get(kind):
                    ids = {"groups": kinds[kind]} if kind == "classic" else {"group_ids": kinds[kind]}
                    answer = await self.send(api, {**ids, "include_authorized_operations": False}, node)
                    described += answer["groups"]
            offsets = await self._committed(node, kinds.get("classic", []) + kinds.get("consumer", []))
            share_lags = await self._share_lags(node, kinds.get("share", []))
            for d in described:
                committed, code = offsets.get(d["group_id"], ({}, 0))
                lag, share_code = share_lags.get(d["group_id"], (None, 0))
                results[d["group_id"]] = GroupSummary(d["group_state"], len(d["members"]), committed, lag,
                                                      d["error_code"] or code or share_code)
        return results

    async def _committed(self, node: int, ids: list[str]) -> dict[str, tuple[dict, int]]:
        """The groups' committed offsets (group -> ({(topic, partition): offset}, error code)) from their
        coordinator."""
        if not ids:
            return {}

        def body(version: int) -> dict:
            if version >= 8:
                return {"groups": [{"group_id": g, "member_id": None, "member_epoch": -1, "topics": None}
                                   for g in ids], "require_stable": False}
            return {"group_id": ids[0], "topics": None, "require_stable": False}

        version, fetched = await self.send_versioned("OffsetFetch", body, node)
        offsets: dict[str, tuple[dict, int]] = {}
        for group in fetched["groups"] if version >= 8 else [{**fetched, "group_id": ids[0]}]:
            offsets[group["group_id"]] = ({(t["name"], p["partition_index"]): p["committed_offset"]
                                           for t in group["topics"] for p in t["partitions"]
                                           if not p["error_code"] and p["committed_offset"] >= 0},
                                          group.get("error_code", 0))
        for g in ids[1:] if version < 8 else ():
            try:
                offsets[g] = (await self.list_group_offsets(g), 0)
            except KafkaError as exc:
                offsets[g] = ({}, exc.code)
        return offsets

    async def _share_lags(self, node: int, ids: list[str]) -> dict[str, tuple[int | None, int]]:
        """Share groups' total lag (group -> (records not yet acknowledged, None if the broker does not say;
        error code)) from one DescribeShareGroupOffsets to their coordinator."""
        if not ids:
            return {}
        answer = await self.send("DescribeShareGroupOffsets", {
            "groups": [{"group_id": g, "topics": None} for g in ids]}, node)
        lags = {}
        for g in answer["groups"]:
            found = [p.get("lag", -1) for t in g["topics"] for p in t["partitions"] if not p["error_code"]]
            lags[g["group_id"]] = (sum(found) if found and min(found) >= 0 else None, g["error_code"])
        return lags

    async def fetch(self, topic: str, partition: int, offset: int, read_committed: bool,
                    max_bytes: int = 1 << 20) -> dict:
        """One Fetch of one partition from its leader at ``offset``, returning at once; the partition's answer."""
        meta = await self.metadata([topic])
        info = meta.topics.get(topic)
        if info is None or info.error or partition not in info.partitions:
            raise AdminError(f"{topic}-{partition}: no such partition")
        leader = info.partitions[partition].leader
        if leader < 0:
            raise AdminError(f"{topic}-{partition} has no leader")

        def body(version: int) -> dict:
            named = {"topic_id": info.topic_id} if version >= 13 else {"topic": topic}
            return {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": max_bytes,
                    "isolation_level": int(read_committed), "session_id": 0, "session_epoch": -1,
                    "topics": [{**named, "partitions": [{"partition": partition, "current_leader_epoch": -1,
                                                         "fetch_offset": offset, "last_fetched_epoch": -1,
                                                         "log_start_offset": -1, "partition_max_bytes": max_bytes}]}],
                    "forgotten_topics_data": [], "rack_id": ""}

        answer = await self.send("Fetch", body, leader)
        check(f"Fetch {topic}-{partition}", answer.get("error_code", 0))
        (p,) = answer["responses"][0]["partitions"]
        check(f"Fetch {topic}-{partition}", p["error_code"])
        return p
