"""What each page shows, gathered from the cluster with the console's client: plain values for the templates.

Each function costs a bounded number of requests (docs/console.md counts them); the app caches their results
for a few seconds, so several open pages of the same kind cost the cluster what one does.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from ..admin import transactions
from ..admin.client import (
    CONFIG_TOPIC,
    EARLIEST,
    LATEST,
    OPERATIONS,
    PATTERN_TYPES,
    PERMISSIONS,
    RESOURCE_TYPES,
    AclBinding,
    AdminError,
    KafkaError,
    group_type,
)
from ..errors import ErrorCode
from ..security.scram_credentials import MECHANISM_BY_TYPE
from .client import ConsoleClient
from .lag import LagHistory

# Kafka's default transaction.max.timeout.ms, as `moldau transactions find-hanging --max-transaction-timeout`
DEFAULT_MAX_TRANSACTION_TIMEOUT_MS = 15 * 60_000
OPEN_TRANSACTION_STATES = ("Ongoing", "PrepareCommit", "PrepareAbort", "PrepareEpochFence")
NOT_AUTHORIZED = frozenset({ErrorCode.TOPIC_AUTHORIZATION_FAILED, ErrorCode.GROUP_AUTHORIZATION_FAILED,
                            ErrorCode.CLUSTER_AUTHORIZATION_FAILED, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED})


def _names(codes: dict[str, int]) -> dict[int, str]:
    return {code: name.upper() for name, code in codes.items()}


RESOURCE_NAMES, PATTERN_NAMES = _names(RESOURCE_TYPES), _names(PATTERN_TYPES)
OPERATION_NAMES, PERMISSION_NAMES = _names(OPERATIONS), _names(PERMISSIONS)


def refused(exc: KafkaError) -> str:
    """Why a section is empty: not authorized, or another Kafka error; re-raises nothing."""
    if exc.code in NOT_AUTHORIZED:
        return "not authorized: the console's principal may not describe this"
    if exc.code == ErrorCode.SECURITY_DISABLED:
        return "the cluster has no authorizer"
    return str(exc)


# --- the cluster -------------------------------------------------------------------------------------


@dataclass
class BrokerRow:
    node_id: int
    address: str
    rack: str | None
    leaders: int = 0
    replicas: int = 0
    controller: bool = False


@dataclass
class ClusterView:
    cluster_id: str | None
    controller_id: int
    brokers: list[BrokerRow]
    topics: int
    partitions: int
    under_replicated: int
    offline: int
    under_min_isr: int | None  # None: min.insync.replicas could not be read


async def cluster(client: ConsoleClient) -> ClusterView:
    """Metadata of every topic and their min.insync.replicas: 2 requests."""
    meta = await client.metadata(None)
    rows = {b.node_id: BrokerRow(b.node_id, f"{b.host}:{b.port}", b.rack, controller=b.node_id == meta.controller_id)
            for b in meta.brokers.values()}
    try:
        min_isr = {t: int(c["min.insync.replicas"]["value"]) for t, c in
                   (await client.topic_configs(sorted(meta.topics), ["min.insync.replicas"])).items()
                   if "min.insync.replicas" in c}
    except KafkaError:
        min_isr = None
    partitions = under_replicated = offline = under_min = 0
    for topic in meta.topics.values():
        for p in topic.partitions.values():
            partitions += 1
            under_replicated += len(p.isr) < len(p.replicas)
            offline += p.leader < 0
            if min_isr is not None:
                under_min += len(p.isr) < min_isr.get(topic.name, 1)
            if p.leader in rows:
                rows[p.leader].leaders += 1
            for r in p.replicas:
                if r in rows:
                    rows[r].replicas += 1
    return ClusterView(meta.cluster_id, meta.controller_id, sorted(rows.values(), key=lambda b: b.node_id),
                       len(meta.topics), partitions, under_replicated, offline,
                       None if min_isr is None else under_min)


# --- topics ------------------------------------------------------------------------------------------


@dataclass
class TopicRow:
    name: str
    internal: bool
    partitions: int
    replication_factor: int
    size: int | None  # bytes in the leaders' logs; None: unknown (DescribeLogDirs refused)
    messages: int  # end offsets minus start offsets
    per_second: float | None  # end offsets' growth since the previous look; None: first look


class Rates:
    """Messages per second of each topic, from the growth of its end offsets between two looks."""

    def __init__(self):
        self._last: dict[str, tuple[float, int, float | None]] = {}  # topic -> (when, end offsets, rate)

    def update(self, topic: str, end: int, now: float) -> float | None:
        when, before, rate = self._last.get(topic, (0.0, end, None))
        if now - when > 60:  # a stale look says nothing about now
            rate = None
        elif now - when >= 1:
            rate = max(end - before, 0) / (now - when)
        else:
            return rate
        self._last[topic] = (now, end, rate)
        return rate


async def topics(client: ConsoleClient, rates: Rates) -> list[TopicRow]:
    """Metadata, start and end offsets (a Metadata and a ListOffsets per leader, each), DescribeLogDirs
    per broker."""
    meta = await client.metadata(None)
    tps = [(t.name, p.partition) for t in meta.topics.values() if not t.error for p in t.partitions.values()
           if p.leader >= 0]
    starts = await client.list_offsets(tps, EARLIEST) if tps else {}
    ends = await client.list_offsets(tps, LATEST) if tps else {}
    sizes = await client.log_dir_sizes(sorted(meta.brokers))
    now = time.monotonic()
    rows = []
    for t in sorted(meta.topics.values(), key=lambda t: t.name):
        if t.error:
            continue
        ps = list(t.partitions.values())
        leader_sizes = [sizes.get((t.name, p.partition, p.leader)) for p in ps]
        end = sum(ends.get((t.name, p.partition), 0) for p in ps)
        rows.append(TopicRow(
            t.name, t.internal, len(ps), len(ps[0].replicas) if ps else 0,
            None if None in leader_sizes else sum(leader_sizes),
            end - sum(starts.get((t.name, p.partition), 0) for p in ps), rates.update(t.name, end, now)))
    return rows


@dataclass
class PartitionRow:
    partition: int
    leader: int
    replicas: list[int]
    isr: list[int]
    offline: list[int]
    start: int | None
    end: int | None  # the high watermark
    stable: int | None  # the last stable offset


@dataclass
class TopicView:
    name: str
    internal: bool
    partitions: list[PartitionRow]
    configs: list[dict] = field(default_factory=list)
    configs_refused: str | None = None


async def topic(client: ConsoleClient, name: str, configs: bool = True) -> TopicView:
    """Metadata, three ListOffsets rounds (start, high watermark, last stable offset) and (``configs``)
    DescribeConfigs."""
    meta = await client.metadata([name])
    info = meta.topics.get(name)
    if info is None or info.error:
        raise KafkaError(f"topic {name}", info.error if info else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    tps = [(name, p) for p, state in sorted(info.partitions.items()) if state.leader >= 0]
    starts = await client.list_offsets(tps, EARLIEST) if tps else {}
    ends = await client.list_offsets(tps, LATEST) if tps else {}
    stable = await client.list_offsets(tps, LATEST, read_committed=True) if tps else {}
    view = TopicView(name, info.internal, [
        PartitionRow(p.partition, p.leader, p.replicas, p.isr, p.offline, starts.get((name, p.partition)),
                     ends.get((name, p.partition)), stable.get((name, p.partition)))
        for p in sorted(info.partitions.values(), key=lambda p: p.partition)])
    if configs:
        try:
            view.configs = sorted(await client.describe_configs(CONFIG_TOPIC, name), key=lambda c: c["name"])
        except KafkaError as exc:
            view.configs_refused = refused(exc)
    return view


# --- consumer groups ---------------------------------------------------------------------------------


@dataclass
class GroupRow:
    group_id: str
    type: str
    state: str
    members: int
    lag: int | None  # None: no committed offsets to measure from
    error: str | None = None


@dataclass
class LagRow:
    topic: str
    partition: int
    committed: int | None  # a share group's: its start offset (SPSO)
    end: int | None
    member: str
    share_lag: int | None = None  # a share group's: records from its start offset not yet acknowledged

    @property
    def lag(self) -> int | None:
        if self.share_lag is not None:
            return self.share_lag
        if self.committed is None or self.end is None:
            return None
        return max(self.end - self.committed, 0)


@dataclass
class GroupView:
    group_id: str
    type: str  # classic, consumer (KIP-848) or share (KIP-932)
    state: str
    protocol: str
    coordinator: str
    members: list
    rows: list[LagRow]
    group_epoch: int | None = None
    assignment_epoch: int | None = None

    @property
    def lag(self) -> int:
        return sum(r.lag for r in self.rows if r.lag is not None)


async def _end_offsets(client: ConsoleClient, tps: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
    """High watermarks of the partitions that have a leader (Metadata, a ListOffsets per leader)."""
    if not tps:
        return {}
    meta = await client.metadata(sorted({t for t, _ in tps}))
    led = [tp for tp in tps if (t := meta.topics.get(tp[0])) and not t.error and tp[1] in t.partitions
           and t.partitions[tp[1]].leader >= 0]
    return await client.list_offsets(led, LATEST) if led else {}


async def groups(client: ConsoleClient, history: LagHistory) -> list[GroupRow]:
    """ListGroups on every broker; a FindCoordinator for the groups whose coordinator is not known; per
    coordinator a describe of each type and OffsetFetch / DescribeShareGroupOffsets (ConsoleClient.describe_groups);
    Metadata and a ListOffsets per leader for the ends. Each group's total lag goes into history."""
    listed = {g["group_id"]: g for g in await client.list_groups()}
    described = await client.describe_groups({g: group_type(listed[g]) for g in listed})
    ends = await _end_offsets(client, sorted({tp for d in described.values() for tp in d.committed}))
    rows = []
    for group_id in sorted(listed):
        d = described[group_id]
        lags = [max(ends[tp] - offset, 0) for tp, offset in d.committed.items() if tp in ends]
        lag = d.share_lag if d.share_lag is not None else sum(lags) if lags else None
        if lag is not None:
            history.add(group_id, lag)
        rows.append(GroupRow(group_id, group_type(listed[group_id]), d.state or listed[group_id].get("group_state") or "",
                             d.members, lag, refused(KafkaError(f"group {group_id}", d.error)) if d.error else None))
    return rows


async def group(client: ConsoleClient, group_id: str, history: LagHistory) -> GroupView:
    """A KIP-848 or classic group (ConsumerGroupDescribe, else DescribeGroups), OffsetFetch, Metadata and a
    ListOffsets per leader; a share group (ShareGroupDescribe, where the others do not know the group) with
    DescribeShareGroupOffsets instead of OffsetFetch. The total lag goes into history."""
    described = await client.describe_group(group_id)
    if described.type == "classic" and described.state == "Dead":
        try:
            described = (await client.describe_share_groups([group_id]))[group_id]
        except KafkaError as exc:
            if exc.code not in (ErrorCode.GROUP_ID_NOT_FOUND, ErrorCode.UNSUPPORTED_VERSION):
                raise
        except AdminError:  # a broker without share groups
            pass
    assigned: dict[tuple[str, int], list[str]] = {}
    for m in described.members:
        for tp in m.assignment:
            assigned.setdefault(tp, []).append(f"{m.client_id} ({m.host})")
    if described.type == "share":
        starts = {(o.topic, o.partition): o for o in await client.share_group_offsets(group_id)}
        tps = sorted(set(starts) | set(assigned))
        ends = await _end_offsets(client, tps)
        rows = [LagRow(t, p, starts[(t, p)].start_offset if (t, p) in starts else None, ends.get((t, p)),
                       ", ".join(assigned.get((t, p), [])), starts[(t, p)].lag if (t, p) in starts else None)
                for t, p in tps]
    else:
        committed = await client.list_group_offsets(group_id)
        tps = sorted(set(committed) | set(assigned))
        ends = await _end_offsets(client, tps)
        rows = [LagRow(t, p, committed.get((t, p)), ends.get((t, p)), ", ".join(assigned.get((t, p), [])))
                for t, p in tps]
    view = GroupView(group_id, described.type, described.state, described.protocol, f"{described.coordinator.host}:"
                     f"{described.coordinator.port} (broker {described.coordinator.node_id})",
                     described.members, rows, described.group_epoch, described.assignment_epoch)
    if rows:
        history.add(group_id, view.lag)
    return view


# --- transactions ------------------------------------------------------------------------------------


@dataclass
class TransactionRow:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    state: str
    age_ms: int | None
    timeout_ms: int
    coordinator: int
    partitions: list[tuple[str, int, int | None, int | None]]  # topic, partition, last stable offset, HW


@dataclass
class TransactionsView:
    open: list[TransactionRow]
    in_partitions: list  # broker.admin.transactions.OpenTransaction, as the partitions' leaders see them
    hanging: set[tuple[str, int, int]]  # (topic, partition, start offset)
    max_timeout_ms: int


async def transactions_view(client: ConsoleClient, max_timeout_ms: int) -> TransactionsView:
    """ListTransactions per broker, DescribeTransactions per open one, the held-back partitions' offsets, and
    `moldau transactions find-hanging`'s requests (DescribeProducers per leader, ...)."""
    now = int(time.time() * 1000)
    listed = [t for t in await client.list_transactions() if t["transaction_state"] in OPEN_TRANSACTION_STATES]
    found = []
    for t in sorted(listed, key=lambda t: t["transactional_id"]):
        try:
            d = await client.describe_transaction(t["transactional_id"])
        except KafkaError:
            continue  # ended between the two requests, or not ours to see
        if d["transaction_state"] not in OPEN_TRANSACTION_STATES:
            continue
        start = d["transaction_start_time_ms"]
        found.append(TransactionRow(d["transactional_id"], d["producer_id"], d["producer_epoch"],
                                     d["transaction_state"], now - start if start >= 0 else None,
                                     d["transaction_timeout_ms"], d["coordinator"],
                                     [(x["topic"], p, None, None) for x in d["topics"] for p in x["partitions"]]))
    held = sorted({(tp[0], tp[1]) for t in found for tp in t.partitions})
    if held:
        stable = await client.list_offsets(held, LATEST, read_committed=True)
        ends = await client.list_offsets(held, LATEST)
        for t in found:
            t.partitions = [(topic, p, stable.get((topic, p)), ends.get((topic, p))) for topic, p, _, _ in t.partitions]
    meta = await client.metadata(None)
    tps = sorted((t.name, p) for t in meta.topics.values() if not t.error for p, s in t.partitions.items()
                 if s.leader >= 0)
    in_partitions = await transactions.open_transactions(client, tps) if tps else []
    # find_hanging's rule, on the open transactions already read
    hanging = await transactions.hanging(client, [t for t in in_partitions if now - t.last_timestamp > max_timeout_ms])
    return TransactionsView(found, sorted(in_partitions, key=lambda t: (t.topic, t.partition, t.start_offset)),
                            {(t.topic, t.partition, t.start_offset) for t in hanging}, max_timeout_ms)


# --- ACLs and SCRAM users ----------------------------------------------------------------------------


@dataclass
class AclRow:
    resource_type: str
    pattern_type: str
    resource_name: str
    principal: str
    host: str
    operation: str
    permission: str


async def acls(client: ConsoleClient) -> tuple[list[AclRow], str | None]:
    """One DescribeAcls; (rows, why there are none to show)."""
    every = AclBinding(RESOURCE_TYPES["any"], None, PATTERN_TYPES["any"], None, None, OPERATIONS["any"],
                       PERMISSIONS["any"])
    try:
        found = await client.describe_acls(every)
    except KafkaError as exc:
        return [], refused(exc)
    return sorted((AclRow(RESOURCE_NAMES.get(a.resource_type, str(a.resource_type)),
                          PATTERN_NAMES.get(a.pattern_type, str(a.pattern_type)), a.resource_name, a.principal,
                          a.host, OPERATION_NAMES.get(a.operation, str(a.operation)),
                          PERMISSION_NAMES.get(a.permission, str(a.permission))) for a in found),
                  key=lambda r: (r.resource_type, r.resource_name, r.principal, r.operation)), None


async def scram_users(client: ConsoleClient) -> tuple[list, str | None]:
    """One DescribeUserScramCredentials; (users, why there are none to show)."""
    try:
        found = await client.describe_user_scram_credentials()
    except KafkaError as exc:
        return [], refused(exc)
    return sorted((user, [(MECHANISM_BY_TYPE.get(m, str(m)), iterations) for m, iterations in sorted(c.items())])
                  for user, c in found.items()), None
