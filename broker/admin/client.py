"""An asyncio admin client that speaks only the Kafka protocol, through the project's own codec, so it works
against any Kafka cluster: the `moldau topics|consumer-groups|configs|acls|transactions|cluster describe`
tools and the web console are built on it.

Use::

    security = client_security.from_properties(read_properties(path))   # or ClientSecurity() for PLAINTEXT
    async with AdminClient("host1:9092,host2:9092", security, timeout_s=30) as admin:
        meta = await admin.metadata()                     # ClusterMetadata: brokers, controller, topics
        await admin.create_topics([NewTopic("t", 3, 1, {"cleanup.policy": "compact"})])
        offsets = await admin.list_group_offsets("g")     # {(topic, partition): offset}
        lag = await admin.group_lag(await admin.describe_group("g"))  # [PartitionLag], as kafka-consumer-groups
        share = await admin.describe_share_groups(["s"])  # {group: GroupDescription}, and share_group_offsets("s")

Routing (Kafka's admin client's): ``send(api, body)`` goes to any broker, ``node=`` to one broker,
``send_to_leader`` to a partition's leader, ``send_to_coordinator`` to a group's or transactional id's
coordinator (FindCoordinator), ``send_to_controller`` to the controller Metadata names. The first request to
each broker is ApiVersions; every request then goes at the highest version that broker, the codec and the
body shapes here all have (``_CEILINGS``: versions that name topics by id are not sent). ``body`` may be a
function of that version for APIs whose fields changed.

Every failure is an ``AdminError`` whose text is one line for an operator: an unreachable broker, a timeout,
a refused login, an API the broker does not serve, or a Kafka error code (``KafkaError``, with ``.code``).
A connection carries one request at a time; requests to different brokers run concurrently.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
import struct
from dataclasses import dataclass, field
from typing import Callable, Iterable

from protocol import codec
from protocol.frames import API_KEYS
from storage import clock

from ..cluster.client_security import ClientSecurity
from ..cluster.network import BrokerConnection
from ..errors import ErrorCode
from ..security import authorizer
from ..security.authorizer import AclBinding  # as a filter, None names and hosts match any
from ..security.scram_credentials import MECHANISMS as SCRAM_MECHANISMS

CLIENT_ID = "moldau-admin"
SOFTWARE_VERSION = "1"

# Newer versions than these name topics by id only; the admin requests here name them.
_CEILINGS = {"OffsetFetch": 9, "OffsetCommit": 9}

# pauses before trying the brokers again when none answered (one restarting, a refused connection)
_RECONNECT_BACKOFF_S = (0.1, 0.3)

GROUP_KEY, TRANSACTION_KEY = 0, 1  # FindCoordinator key types
EARLIEST, LATEST = -2, -1  # ListOffsets timestamps


def _snake_names(codes: dict[str, int]) -> dict[str, int]:
    """The authorizer's tables of Kafka's ACL codes, by snake_case name ("transactional_id"), with "unknown"."""
    return {"unknown": 0, **{re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower(): code for name, code in codes.items()}}


# Kafka's ACL codes (AclResourceType, PatternType, AclOperation, AclPermissionType)
RESOURCE_TYPES = _snake_names(authorizer.RESOURCE_TYPES)
PATTERN_TYPES = _snake_names(authorizer.PATTERN_TYPES)
OPERATIONS = _snake_names(authorizer.OPERATIONS)
PERMISSIONS = _snake_names(authorizer.PERMISSIONS)
CONFIG_TOPIC, CONFIG_BROKER, CONFIG_BROKER_LOGGER = 2, 4, 8  # ConfigResource.Type
CONFIG_SET, CONFIG_DELETE = 0, 1  # IncrementalAlterConfigs operations
MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2  # DescribeClientQuotas match types


class AdminError(Exception):
    """What went wrong, in one line."""


class KafkaError(AdminError):
    """A Kafka error code in an answer."""

    def __init__(self, what: str, code: int, message: str | None = None):
        self.code = code
        super().__init__(f"{what}: {error_name(code)}" + (f" ({message})" if message else ""))


def error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error {code}"


def check(what: str, code: int, message: str | None = None) -> None:
    if code:
        raise KafkaError(what, code, message)


def parse_bootstrap(text: str) -> list[tuple[str, int]]:
    """``host:port[,host:port]`` -> addresses; AdminError naming the one that is not host:port."""
    addresses = []
    for item in text.split(","):
        host, _, port = item.strip().rpartition(":")
        if not port.isdigit() or not 0 < int(port) < 65536:
            raise AdminError(f"bootstrap server {item.strip()!r} is not host:port")
        addresses.append((host.strip("[]") or "127.0.0.1", int(port)))
    return addresses


@dataclass
class Broker:
    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass
class PartitionInfo:
    partition: int
    leader: int
    replicas: list[int]
    isr: list[int]
    offline: list[int]
    error: int = 0


@dataclass
class TopicInfo:
    name: str
    topic_id: object
    internal: bool
    partitions: dict[int, PartitionInfo]
    error: int = 0


@dataclass
class ClusterMetadata:
    cluster_id: str | None
    controller_id: int
    brokers: dict[int, Broker]
    topics: dict[str, TopicInfo]


@dataclass
class NewTopic:
    name: str
    partitions: int = -1  # -1: the broker's num.partitions
    replication_factor: int = -1  # -1: the broker's default.replication.factor
    configs: dict[str, str] = field(default_factory=dict)


@dataclass
class GroupMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    host: str
    assignment: list[tuple[str, int]]  # the consumer protocol's assigned partitions
    member_epoch: int | None = None  # KIP-848 and share groups only
    target: list[tuple[str, int]] | None = None  # a KIP-848 member's target assignment


@dataclass
class GroupDescription:
    group_id: str
    state: str
    protocol_type: str
    protocol: str  # a classic group's assignment strategy, a KIP-848 or share group's assignor
    members: list[GroupMember]
    coordinator: Broker
    type: str = "classic"  # Kafka's GroupType: classic, consumer (KIP-848) or share (KIP-932)
    group_epoch: int | None = None  # KIP-848 and share groups only
    assignment_epoch: int | None = None


@dataclass
class SharePartitionOffset:
    """A share group's partition: its share-partition start offset (SPSO) and the records from there not yet
    acknowledged (None where the broker does not say: DescribeShareGroupOffsets v0)."""
    topic: str
    partition: int
    start_offset: int
    leader_epoch: int
    lag: int | None


@dataclass
class PartitionLag:
    """One partition of a group: its committed offset and log end offset (None where there is none), the lag
    between them, and the member it is assigned to (None: no member)."""
    topic: str
    partition: int
    committed: int | None
    log_end: int | None
    member: GroupMember | None

    @property
    def lag(self) -> int | None:
        return None if self.committed is None or self.log_end is None else self.log_end - self.committed


class AdminClient:
    """See the module docstring. ``bootstrap_servers``: ``host:port[,host:port]``."""

    def __init__(self, bootstrap_servers: str, security: ClientSecurity | None = None, *,
                 client_id: str = CLIENT_ID, timeout_s: float = 30.0) -> None:
        self.bootstrap = parse_bootstrap(bootstrap_servers)
        self.security = security or ClientSecurity()
        self.client_id = client_id
        self.timeout_s = timeout_s
        self.brokers: dict[int, Broker] = {}  # from the last Metadata
        self._connections: dict[tuple[str, int], BrokerConnection] = {}
        self._versions: dict[tuple[str, int], dict[int, tuple[int, int]]] = {}  # address -> api key -> range
        self._versions_lock = asyncio.Lock()

    async def __aenter__(self) -> "AdminClient":
        await self.metadata([])
        return self

    async def __aexit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        for connection in self._connections.values():
            connection.close()
        self._connections.clear()

    # --- requests and their routing ------------------------------------------------------------

    async def send(self, api: str, body: dict | Callable[[int], dict], node: int | None = None) -> dict:
        """One request to broker ``node`` (None: any broker, the bootstrap ones first) and its answer."""
        return (await self.send_versioned(api, body, node))[1]

    async def send_versioned(self, api: str, body: dict | Callable[[int], dict],
                             node: int | None = None) -> tuple[int, dict]:
        """As send, and the version it went at (for answers whose fields changed)."""
        if node is not None:
            broker = self.brokers.get(node)
            if broker is None:
                raise AdminError(f"no broker {node} in the cluster's metadata")
            return await self._send_to((broker.host, broker.port), api, body)
        addresses = list(dict.fromkeys([*self.bootstrap, *((b.host, b.port) for b in self.brokers.values())]))
        for backoff in (*_RECONNECT_BACKOFF_S, None):
            for address in addresses:
                try:
                    return await self._send_to(address, api, body)
                except _Unreachable:
                    if backoff is None and address == addresses[-1]:
                        raise
            await clock.sleep(backoff)
        raise AssertionError("not reached")

    async def send_to_leader(self, topic: str, partition: int, api: str, body: dict | Callable[[int], dict]) -> dict:
        return await self.send(api, body, await self.leader(topic, partition))

    async def send_to_coordinator(self, key_type: int, key: str, api: str,
                                  body: dict | Callable[[int], dict]) -> dict:
        """To the coordinator of a group (GROUP_KEY) or transactional id (TRANSACTION_KEY)."""
        return await self.send(api, body, (await self.coordinator(key_type, key)).node_id)

    async def send_to_controller(self, api: str, body: dict | Callable[[int], dict]) -> dict:
        controller = (await self.metadata([])).controller_id
        if controller < 0:
            raise AdminError("the cluster names no controller")
        return await self.send(api, body, controller)

    async def api_versions(self, node: int | None = None) -> dict[str, tuple[int, int]]:
        """The versions a broker serves, by API name (those the codec knows)."""
        broker = self.brokers[node] if node is not None else None
        address = (broker.host, broker.port) if broker else self.bootstrap[0]
        ranges = await self._ranges(address)
        names = {key: name for name, key in API_KEYS.items()}
        return {names[key]: r for key, r in ranges.items() if key in names}

    async def _send_to(self, address: tuple[str, int], api: str, body) -> tuple[int, dict]:
        version = self._negotiate(address, api, await self._ranges(address))
        payload = body(version) if callable(body) else body
        return version, await self._roundtrip(address, api, version, payload)

    async def _ranges(self, address: tuple[str, int]) -> dict[int, tuple[int, int]]:
        async with self._versions_lock:
            if address not in self._versions:
                try:
                    answer = await self._roundtrip(address, "ApiVersions", 3, {
                        "client_software_name": self.client_id, "client_software_version": SOFTWARE_VERSION})
                except _Unreachable:
                    raise
                except AdminError:  # a broker before ApiVersions v3 (Kafka 2.4) answers in v0
                    answer = await self._roundtrip(address, "ApiVersions", 0, {})
                check(f"ApiVersions to {_text(address)}", answer["error_code"])
                self._versions[address] = {k["api_key"]: (k["min_version"], k["max_version"])
                                           for k in answer["api_keys"]}
            return self._versions[address]

    @staticmethod
    def _negotiate(address: tuple[str, int], api: str, ranges: dict[int, tuple[int, int]]) -> int:
        ours = codec.valid_versions(api + "Request")
        theirs = ranges.get(API_KEYS[api])
        high = min(ours.hi, _CEILINGS.get(api, ours.hi), theirs[1] if theirs else -1)
        if theirs is None or high < max(ours.lo, theirs[0]):
            served = f"versions {theirs[0]}-{theirs[1]}" if theirs else "no version"
            raise AdminError(f"{_text(address)} does not serve {api} in a version this client speaks "
                             f"(it serves {served}; this client {ours.lo}-{min(ours.hi, _CEILINGS.get(api, 99))})")
        return high

    async def _roundtrip(self, address: tuple[str, int], api: str, version: int, body: dict) -> dict:
        connection = self._connections.get(address)
        if connection is None:
            connection = self._connections[address] = BrokerConnection(self.client_id, self.security)
        try:
            return await connection.request(address, api, version, body, self.timeout_s)
        except TimeoutError:
            raise _Unreachable(f"{api} to {_text(address)}: no answer within {self.timeout_s:g} s") from None
        except ConnectionRefusedError as exc:
            if exc.errno is None:  # ClientSecurity's: the SASL login was refused, not the connection
                raise AdminError(f"{_text(address)} refused the login: {exc}") from None
            raise _Unreachable(f"cannot reach {_text(address)}: {exc.strerror}") from None
        except EOFError:  # as a SASL listener does to a client that did not log in
            raise _Unreachable(f"{api} to {_text(address)}: the broker closed the connection") from None
        except OSError as exc:  # refused, reset, a TLS failure
            raise _Unreachable(f"{api} to {_text(address)}: {exc.strerror or exc}") from None
        except (ValueError, struct.error, IndexError) as exc:  # not a Kafka broker's answer
            raise AdminError(f"{api} to {_text(address)}: cannot read the answer ({exc})") from None

    # --- metadata --------------------------------------------------------------------------------

    async def metadata(self, topics: Iterable[str] | None = None) -> ClusterMetadata:
        """The cluster's brokers and controller, and ``topics`` (None: every topic; []: none)."""
        names = None if topics is None else list(topics)

        def body(version: int) -> dict:
            if names is None and version == 0:
                return {"topics": []}  # v0's "every topic"
            return {"topics": None if names is None else [{"name": n} for n in names],
                    "allow_auto_topic_creation": False}

        answer = await self.send("Metadata", body)
        check("Metadata", answer.get("error_code", 0))
        self.brokers = {b["node_id"]: Broker(b["node_id"], b["host"], b["port"], b.get("rack"))
                        for b in answer["brokers"]}
        found = {}
        for t in answer["topics"]:
            found[t["name"]] = TopicInfo(t["name"], t.get("topic_id"), t.get("is_internal", False), {
                p["partition_index"]: PartitionInfo(p["partition_index"], p["leader_id"], p["replica_nodes"],
                                                    p["isr_nodes"], p.get("offline_replicas", []), p["error_code"])
                for p in t["partitions"]}, t["error_code"])
        return ClusterMetadata(answer.get("cluster_id"), answer.get("controller_id", -1), self.brokers, found)

    async def leader(self, topic: str, partition: int) -> int:
        info = (await self.metadata([topic])).topics.get(topic)
        if info is None or info.error:
            raise KafkaError(f"topic {topic}", info.error if info else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        p = info.partitions.get(partition)
        if p is None:
            raise AdminError(f"{topic}-{partition}: no such partition")
        if p.leader < 0:
            raise AdminError(f"{topic}-{partition} has no leader")
        return p.leader

    async def coordinator(self, key_type: int, key: str) -> Broker:
        def body(version: int) -> dict:
            return {"key_type": key_type, **({"coordinator_keys": [key]} if version >= 4 else {"key": key})}

        version, answer = await self.send_versioned("FindCoordinator", body)
        found = answer["coordinators"][0] if version >= 4 else answer
        check(f"FindCoordinator {key}", found["error_code"], found.get("error_message"))
        broker = Broker(found["node_id"], found["host"], found["port"])
        self.brokers.setdefault(broker.node_id, broker)
        return broker

    async def describe_cluster(self) -> dict:
        """DescribeCluster's answer (cluster id, controller, brokers with racks), or Metadata's on a broker
        before Kafka 2.8."""
        try:
            answer = await self.send("DescribeCluster", {"include_cluster_authorized_operations": False,
                                                         "endpoint_type": 1})
        except AdminError as exc:
            if "does not serve DescribeCluster" not in str(exc):
                raise
            meta = await self.metadata([])
            return {"cluster_id": meta.cluster_id, "controller_id": meta.controller_id, "brokers": [
                {"broker_id": b.node_id, "host": b.host, "port": b.port, "rack": b.rack}
                for b in meta.brokers.values()]}
        check("DescribeCluster", answer["error_code"], answer["error_message"])
        return answer

    # --- topics ------------------------------------------------------------------------------------

    async def create_topics(self, topics: list[NewTopic], validate_only: bool = False) -> None:
        answer = await self.send_to_controller("CreateTopics", {
            "topics": [{"name": t.name, "num_partitions": t.partitions, "replication_factor": t.replication_factor,
                        "assignments": [], "configs": [{"name": k, "value": v} for k, v in t.configs.items()]}
                       for t in topics],
            "timeout_ms": int(self.timeout_s * 1000), "validate_only": validate_only})
        for t in answer["topics"]:
            check(f"create topic {t['name']}", t["error_code"], t.get("error_message"))

    async def delete_topics(self, names: list[str]) -> None:
        def body(version: int) -> dict:
            timeout = int(self.timeout_s * 1000)
            if version >= 6:
                return {"topics": [{"name": n} for n in names], "timeout_ms": timeout}
            return {"topic_names": names, "timeout_ms": timeout}

        answer = await self.send_to_controller("DeleteTopics", body)
        for t in answer["responses"]:
            check(f"delete topic {t['name']}", t["error_code"], t.get("error_message"))

    async def create_partitions(self, counts: dict[str, int], validate_only: bool = False) -> None:
        """Grow each topic to its count of partitions."""
        answer = await self.send_to_controller("CreatePartitions", {
            "topics": [{"name": n, "count": c, "assignments": None} for n, c in counts.items()],
            "timeout_ms": int(self.timeout_s * 1000), "validate_only": validate_only})
        for t in answer["results"]:
            check(f"alter topic {t['name']}", t["error_code"], t.get("error_message"))

    async def list_offsets(self, partitions: Iterable[tuple[str, int]], timestamp: int,
                           read_committed: bool = False) -> dict[tuple[str, int], int]:
        """Each partition's offset at ``timestamp`` (EARLIEST, LATEST, or ms: the first offset at or after
        it, -1 if none), asked of its leader."""
        meta = await self.metadata(sorted({t for t, _ in partitions}))
        by_leader: dict[int, dict[str, list[int]]] = {}
        for topic, partition in partitions:
            info = meta.topics.get(topic)
            p = info.partitions.get(partition) if info else None
            if p is None:
                raise AdminError(f"{topic}-{partition}: no such partition")
            if p.leader < 0:
                raise AdminError(f"{topic}-{partition} has no leader")
            by_leader.setdefault(p.leader, {}).setdefault(topic, []).append(partition)

        async def ask(leader: int, topics: dict[str, list[int]]) -> dict:
            return await self.send("ListOffsets", {
                "replica_id": -1, "isolation_level": int(read_committed), "timeout_ms": int(self.timeout_s * 1000),
                "topics": [{"name": t, "partitions": [{"partition_index": p, "current_leader_epoch": -1,
                                                        "timestamp": timestamp} for p in ps]}
                           for t, ps in topics.items()]}, leader)

        found = {}
        for answer in await asyncio.gather(*(ask(n, ts) for n, ts in by_leader.items())):
            for t in answer["topics"]:
                for p in t["partitions"]:
                    check(f"ListOffsets {t['name']}-{p['partition_index']}", p["error_code"])
                    found[(t["name"], p["partition_index"])] = p["offset"]
        return found

    # --- configs -----------------------------------------------------------------------------------

    async def describe_configs(self, resource_type: int, name: str, keys: list[str] | None = None,
                               synonyms: bool = False) -> list[dict]:
        """DescribeConfigs' entries (name, value, read_only, config_source, is_sensitive, synonyms) of one
        resource; a broker's goes to that broker (name: its node id; "" for the cluster-wide defaults)."""
        node = int(name) if resource_type in (CONFIG_BROKER, CONFIG_BROKER_LOGGER) and name else None
        answer = await self.send("DescribeConfigs", {
            "resources": [{"resource_type": resource_type, "resource_name": name, "configuration_keys": keys}],
            "include_synonyms": synonyms, "include_documentation": False}, node)
        (result,) = answer["results"]
        check(f"describe configs of {name or 'the default'}", result["error_code"], result["error_message"])
        return result["configs"]

    async def describe_topic_configs(self, topics: list[str], keys: list[str] | None = None) -> dict[str, list[dict]]:
        """Many topics' configs in one DescribeConfigs (entries as describe_configs gives them)."""
        if not topics:
            return {}
        answer = await self.send("DescribeConfigs", {"resources": [
            {"resource_type": CONFIG_TOPIC, "resource_name": t, "configuration_keys": keys} for t in topics],
            "include_synonyms": False, "include_documentation": False})
        found = {}
        for result in answer["results"]:
            check(f"describe configs of {result['resource_name']}", result["error_code"], result["error_message"])
            found[result["resource_name"]] = result["configs"]
        return found


    async def alter_configs(self, resource_type: int, name: str, set_: dict[str, str], delete: Iterable[str] = (),
                            validate_only: bool = False) -> None:
        """IncrementalAlterConfigs: set some configs, remove others (back to their defaults)."""
        node = int(name) if resource_type in (CONFIG_BROKER, CONFIG_BROKER_LOGGER) and name else None
        answer = await self.send("IncrementalAlterConfigs", {"resources": [{
            "resource_type": resource_type, "resource_name": name,
            "configs": [{"name": k, "config_operation": CONFIG_SET, "value": v} for k, v in set_.items()]
                       + [{"name": k, "config_operation": CONFIG_DELETE, "value": None} for k in delete]}],
            "validate_only": validate_only}, node)
        (result,) = answer["responses"]
        check(f"alter configs of {name or 'the default'}", result["error_code"], result["error_message"])

    async def describe_client_quotas(self, components: list[tuple[str, int, str | None]],
                                     strict: bool = False) -> list[tuple[dict[str, str | None], dict[str, float]]]:
        """Quotas of the entities matching ``components`` ((entity type "user" / "client-id" / "ip", MATCH_EXACT
        / MATCH_DEFAULT / MATCH_SPECIFIED, name for MATCH_EXACT)); ``strict``: entities of only these types.
        Each as ({entity type: name, None for the default}, {quota: value})."""
        answer = await self.send("DescribeClientQuotas", {"components": [
            {"entity_type": t, "match_type": m, "match": n} for t, m, n in components], "strict": strict})
        check("DescribeClientQuotas", answer["error_code"], answer["error_message"])
        return [({e["entity_type"]: e["entity_name"] for e in entry["entity"]},
                 {v["key"]: v["value"] for v in entry["values"]}) for entry in answer["entries"] or []]

    async def alter_client_quotas(self, entity: dict[str, str | None], set_: dict[str, float],
                                  remove: Iterable[str] = ()) -> None:
        answer = await self.send("AlterClientQuotas", {"entries": [{
            "entity": [{"entity_type": t, "entity_name": n} for t, n in entity.items()],
            "ops": [{"key": k, "value": float(v), "remove": False} for k, v in set_.items()]
                   + [{"key": k, "value": 0.0, "remove": True} for k in remove]}], "validate_only": False})
        for entry in answer["entries"]:
            check("AlterClientQuotas", entry["error_code"], entry["error_message"])

    async def describe_user_scram_credentials(self, users: list[str] | None = None) -> dict[str, dict[int, int]]:
        """Each user's SCRAM credentials as {mechanism type: iterations} (None: every user); users without
        any are left out."""
        answer = await self.send("DescribeUserScramCredentials",
                                 {"users": None if users is None else [{"name": u} for u in users]})
        check("DescribeUserScramCredentials", answer["error_code"], answer["error_message"])
        found = {}
        for r in answer["results"]:
            if r["error_code"] == ErrorCode.RESOURCE_NOT_FOUND:
                continue
            check(f"SCRAM credentials of {r['user']}", r["error_code"], r["error_message"])
            found[r["user"]] = {c["mechanism"]: c["iterations"] for c in r["credential_infos"]}
        return found

    async def alter_user_scram_credentials(self, user: str, upsert: dict[str, tuple[int, str]],
                                           delete: Iterable[str] = ()) -> None:
        """Set a user's SCRAM credentials ({mechanism name: (iterations, password)}); the broker gets a salted
        password (PBKDF2 with a fresh salt), never the password. ``delete``: mechanism names."""
        upsertions = []
        for mechanism, (iterations, password) in upsert.items():
            type_, digest = SCRAM_MECHANISMS[mechanism]
            salt = os.urandom(32)
            upsertions.append({"name": user, "mechanism": type_, "iterations": iterations, "salt": salt,
                               "salted_password": hashlib.pbkdf2_hmac(digest, password.encode(), salt, iterations)})
        answer = await self.send_to_controller("AlterUserScramCredentials", {
            "deletions": [{"name": user, "mechanism": SCRAM_MECHANISMS[m][0]} for m in delete],
            "upsertions": upsertions})
        for r in answer["results"]:
            check(f"SCRAM credentials of {r['user']}", r["error_code"], r["error_message"])

    # --- consumer groups ---------------------------------------------------------------------------

    async def list_groups(self, types: Iterable[str] = (), states: Iterable[str] = ()) -> list[dict]:
        """Every broker's groups (group_id, protocol_type, group_state from v4, group_type from v5: KIP-1043),
        only those of these types and states if given (brokers before v4/v5 are filtered here)."""
        types, states = [t.lower() for t in types], list(states)
        body = {"states_filter": states, "types_filter": [t.capitalize() for t in types]}  # as Kafka's admin names them
        meta = await self.metadata([])
        answers = await asyncio.gather(*(self.send("ListGroups", body, n) for n in meta.brokers))
        groups = []
        for node, answer in zip(meta.brokers, answers, strict=False):
            check(f"ListGroups on broker {node}", answer["error_code"])
            groups += answer["groups"]
        return [g for g in groups if (not types or group_type(g) in types)
                and (not states or (g.get("group_state") or "").lower() in {s.lower() for s in states})]

    async def describe_group(self, group_id: str) -> GroupDescription:
        """A consumer group as Kafka's admin client describes it: ConsumerGroupDescribe where the coordinator
        serves it, DescribeGroups for a classic group (the one a KIP-848 coordinator does not know as its own)."""
        coordinator = await self.coordinator(GROUP_KEY, group_id)
        if "ConsumerGroupDescribe" in await self.api_versions(coordinator.node_id):
            try:
                return (await self.describe_consumer_groups([group_id]))[group_id]
            except KafkaError as exc:
                if exc.code != ErrorCode.GROUP_ID_NOT_FOUND:
                    raise
        answer = await self.send("DescribeGroups", {"groups": [group_id], "include_authorized_operations": False},
                                 coordinator.node_id)
        (g,) = answer["groups"]
        check(f"describe group {group_id}", g["error_code"], g.get("error_message"))
        members = [GroupMember(m["member_id"], m.get("group_instance_id"), m["client_id"], m["client_host"],
                               _assigned(m["member_assignment"]) if g["protocol_type"] == "consumer" else [])
                   for m in g["members"]]
        return GroupDescription(g["group_id"], g["group_state"], g["protocol_type"], g["protocol_data"], members,
                                coordinator)

    async def describe_consumer_groups(self, group_ids: list[str]) -> dict[str, GroupDescription]:
        """KIP-848 groups (ConsumerGroupDescribe to each one's coordinator): epochs, assignor, members with
        their assignments, targets and epochs. A group that is not one raises KafkaError GROUP_ID_NOT_FOUND."""
        return await self._describe_new_groups("ConsumerGroupDescribe", "consumer", group_ids)

    async def describe_share_groups(self, group_ids: list[str]) -> dict[str, GroupDescription]:
        """Share groups (ShareGroupDescribe, KIP-932): epochs, members and their assignments."""
        return await self._describe_new_groups("ShareGroupDescribe", "share", group_ids)

    async def _describe_new_groups(self, api: str, kind: str, group_ids: list[str]) -> dict[str, GroupDescription]:
        found = {}
        for group_id in group_ids:
            coordinator = await self.coordinator(GROUP_KEY, group_id)
            answer = await self.send(api, {"group_ids": [group_id], "include_authorized_operations": False},
                                     coordinator.node_id)
            (g,) = answer["groups"]
            check(f"describe group {group_id}", g["error_code"], g.get("error_message"))
            members = [GroupMember(m["member_id"], m.get("instance_id"), m["client_id"], m["client_host"],
                                   _named(m["assignment"]), m["member_epoch"],
                                   _named(m["target_assignment"]) if "target_assignment" in m else None)
                       for m in g["members"]]
            found[group_id] = GroupDescription(group_id, g["group_state"], kind, g["assignor_name"], members,
                                               coordinator, kind, g["group_epoch"], g["assignment_epoch"])
        return found

    async def share_group_offsets(self, group_id: str) -> list[SharePartitionOffset]:
        """DescribeShareGroupOffsets of every partition the share group has state for, sorted."""
        answer = await self.send_to_coordinator(GROUP_KEY, group_id, "DescribeShareGroupOffsets", {
            "groups": [{"group_id": group_id, "topics": None}]})
        (g,) = answer["groups"]
        check(f"offsets of share group {group_id}", g["error_code"], g.get("error_message"))
        found = []
        for t in g["topics"]:
            for p in t["partitions"]:
                check(f"offset of share group {group_id} in {t['topic_name']}-{p['partition_index']}",
                      p["error_code"], p.get("error_message"))
                lag = p.get("lag", -1)
                found.append(SharePartitionOffset(t["topic_name"], p["partition_index"], p["start_offset"],
                                                  p["leader_epoch"], None if lag is None or lag < 0 else lag))
        return sorted(found, key=lambda o: (o.topic, o.partition))

    async def list_group_offsets(self, group_id: str) -> dict[tuple[str, int], int]:
        """The group's committed offsets."""
        def body(version: int) -> dict:
            if version >= 8:
                return {"groups": [{"group_id": group_id, "member_id": None, "member_epoch": -1, "topics": None}],
                        "require_stable": False}
            return {"group_id": group_id, "topics": None, "require_stable": False}

        coordinator = await self.coordinator(GROUP_KEY, group_id)
        version, answer = await self.send_versioned("OffsetFetch", body, coordinator.node_id)
        if version >= 8:
            (group,) = answer["groups"]
            check(f"offsets of group {group_id}", group["error_code"])
            topics = group["topics"]
        else:
            check(f"offsets of group {group_id}", answer.get("error_code", 0))
            topics = answer["topics"]
        found = {}
        for t in topics:
            for p in t["partitions"]:
                check(f"offset of group {group_id} in {t['name']}-{p['partition_index']}", p["error_code"])
                if p["committed_offset"] >= 0:
                    found[(t["name"], p["partition_index"])] = p["committed_offset"]
        return found

    async def group_lag(self, group: GroupDescription) -> list[PartitionLag]:
        """Kafka's lag rows of a described group: the members' partitions (larger assignments first), then the
        partitions the group has offsets for and no member holds. Log ends are each leader's latest offset."""
        committed = await self.list_group_offsets(group.group_id)
        assigned = sorted((m for m in group.members if m.assignment), key=lambda m: -len(m.assignment))
        owned = {tp for m in assigned for tp in m.assignment}
        partitions = sorted(owned | set(committed))
        ends = await self.list_offsets(partitions, LATEST) if partitions else {}
        rows = [PartitionLag(*tp, committed.get(tp), ends.get(tp), m) for m in assigned for tp in sorted(m.assignment)]
        return rows + [PartitionLag(*tp, committed[tp], ends.get(tp), None) for tp in sorted(set(committed) - owned)]

    async def alter_share_group_offsets(self, group_id: str, offsets: dict[tuple[str, int], int]) -> None:
        """Move an empty share group's start offsets (AlterShareGroupOffsets, KIP-932)."""
        topics: dict[str, list[dict]] = {}
        for (topic, partition), offset in sorted(offsets.items()):
            topics.setdefault(topic, []).append({"partition_index": partition, "start_offset": offset})
        answer = await self.send_to_coordinator(GROUP_KEY, group_id, "AlterShareGroupOffsets", {
            "group_id": group_id, "topics": [{"topic_name": t, "partitions": ps} for t, ps in topics.items()]})
        check(f"reset share group {group_id}", answer["error_code"], answer.get("error_message"))
        for t in answer["responses"]:
            for p in t["partitions"]:
                check(f"reset share group {group_id} in {t['topic_name']}-{p['partition_index']}", p["error_code"],
                      p.get("error_message"))

    async def alter_group_offsets(self, group_id: str, offsets: dict[tuple[str, int], int]) -> None:
        """Commit ``offsets`` for a group without members (as Kafka's admin client does)."""
        topics: dict[str, list[dict]] = {}
        for (topic, partition), offset in sorted(offsets.items()):
            topics.setdefault(topic, []).append({"partition_index": partition, "committed_offset": offset,
                                                 "committed_leader_epoch": -1, "committed_metadata": ""})
        answer = await self.send_to_coordinator(GROUP_KEY, group_id, "OffsetCommit", {
            "group_id": group_id, "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
            "retention_time_ms": -1, "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]})
        for t in answer["topics"]:
            for p in t["partitions"]:
                check(f"commit for group {group_id} in {t['name']}-{p['partition_index']}", p["error_code"])

    async def delete_groups(self, group_ids: list[str]) -> dict[str, int]:
        """Each group's error code (0: deleted)."""
        results = {}
        for group_id in group_ids:
            answer = await self.send_to_coordinator(GROUP_KEY, group_id, "DeleteGroups", {"groups_names": [group_id]})
            results.update((r["group_id"], r["error_code"]) for r in answer["results"])
        return results

    # --- ACLs --------------------------------------------------------------------------------------

    async def describe_acls(self, f: AclBinding) -> list[AclBinding]:
        """The ACLs matching a filter (None names and hosts match any; "any" codes for the rest)."""
        answer = await self.send("DescribeAcls", {
            "resource_type_filter": f.resource_type, "resource_name_filter": f.resource_name,
            "pattern_type_filter": f.pattern_type, "principal_filter": f.principal, "host_filter": f.host,
            "operation": f.operation, "permission_type": f.permission})
        check("DescribeAcls", answer["error_code"], answer["error_message"])
        return [AclBinding(r["resource_type"], r["resource_name"], r.get("pattern_type", PATTERN_TYPES["literal"]),
                           a["principal"], a["host"], a["operation"], a["permission_type"])
                for r in answer["resources"] for a in r["acls"]]

    async def create_acls(self, bindings: list[AclBinding]) -> None:
        answer = await self.send("CreateAcls", {"creations": [{
            "resource_type": b.resource_type, "resource_name": b.resource_name, "resource_pattern_type": b.pattern_type,
            "principal": b.principal, "host": b.host, "operation": b.operation, "permission_type": b.permission}
            for b in bindings]})
        for result in answer["results"]:
            check("CreateAcls", result["error_code"], result["error_message"])

    async def delete_acls(self, filters: list[AclBinding]) -> list[AclBinding]:
        """Delete the ACLs matching the filters; returns those deleted."""
        answer = await self.send("DeleteAcls", {"filters": [{
            "resource_type_filter": f.resource_type, "resource_name_filter": f.resource_name,
            "pattern_type_filter": f.pattern_type, "principal_filter": f.principal, "host_filter": f.host,
            "operation": f.operation, "permission_type": f.permission} for f in filters]})
        deleted = []
        for result in answer["filter_results"]:
            check("DeleteAcls", result["error_code"], result["error_message"])
            for m in result["matching_acls"]:
                check("DeleteAcls", m["error_code"], m["error_message"])
                deleted.append(AclBinding(m["resource_type"], m["resource_name"], m.get("pattern_type", 3),
                                          m["principal"], m["host"], m["operation"], m["permission_type"]))
        return deleted

    # --- transactions ------------------------------------------------------------------------------

    async def list_transactions(self, states: Iterable[str] = (), producer_ids: Iterable[int] = ()) -> list[dict]:
        """Every broker's transactional ids (transactional_id, producer_id, transaction_state), with the
        coordinator's node id added as ``coordinator``."""
        meta = await self.metadata([])
        body = {"state_filters": list(states), "producer_id_filters": list(producer_ids), "duration_filter": -1,
                "transactional_id_pattern": None}
        answers = await asyncio.gather(*(self.send("ListTransactions", body, n) for n in meta.brokers))
        found = []
        for node, answer in zip(meta.brokers, answers, strict=False):
            check(f"ListTransactions on broker {node}", answer["error_code"])
            found += [{**t, "coordinator": node} for t in answer["transaction_states"]]
        return found

    async def describe_transaction(self, transactional_id: str) -> dict:
        """DescribeTransactions' state of one transactional id, from its coordinator (``coordinator`` added)."""
        coordinator = await self.coordinator(TRANSACTION_KEY, transactional_id)
        answer = await self.send("DescribeTransactions", {"transactional_ids": [transactional_id]},
                                 coordinator.node_id)
        (state,) = answer["transaction_states"]
        check(f"describe transaction {transactional_id}", state["error_code"])
        return {**state, "coordinator": coordinator.node_id}

    async def describe_producers(self, partitions: Iterable[tuple[str, int]],
                                 node: int | None = None) -> dict[tuple[str, int], list[dict]]:
        """Each partition's active producers (DescribeProducers), from its leader or from ``node``."""
        wanted = list(partitions)
        by_node: dict[int, dict[str, list[int]]] = {}
        for topic, partition in wanted:
            target = node if node is not None else await self.leader(topic, partition)
            by_node.setdefault(target, {}).setdefault(topic, []).append(partition)
        found = {}
        for target, topics in by_node.items():
            answer = await self.send("DescribeProducers", {"topics": [
                {"name": t, "partition_indexes": ps} for t, ps in topics.items()]}, target)
            for t in answer["topics"]:
                for p in t["partitions"]:
                    check(f"DescribeProducers {t['name']}-{p['partition_index']}", p["error_code"],
                          p["error_message"])
                    found[(t["name"], p["partition_index"])] = p["active_producers"]
        return found

    async def abort_transaction(self, topic: str, partition: int, producer_id: int, producer_epoch: int,
                                coordinator_epoch: int) -> None:
        """Write an abort marker for the producer in one partition (WriteTxnMarkers, as Kafka's admin client
        does for kafka-transactions.sh abort)."""
        answer = await self.send_to_leader(topic, partition, "WriteTxnMarkers", {"markers": [{
            "producer_id": producer_id, "producer_epoch": producer_epoch, "transaction_result": False,
            "coordinator_epoch": coordinator_epoch, "topics": [{"name": topic, "partition_indexes": [partition]}]}]})
        check(f"WriteTxnMarkers for producer {producer_id} epoch {producer_epoch} in {topic}-{partition}",
              answer["markers"][0]["topics"][0]["partitions"][0]["error_code"])


class _Unreachable(AdminError):
    """A broker that did not answer: another may."""


def _text(address: tuple[str, int]) -> str:
    return f"{address[0]}:{address[1]}"


def group_type(listed: dict) -> str:
    """A ListGroups entry's type: v5's group_type, else classic (a broker before KIP-1043 knows no other)."""
    return (listed.get("group_type") or "classic").lower()


def _named(assignment: dict | None) -> list[tuple[str, int]]:
    """ConsumerGroupDescribe's / ShareGroupDescribe's assignment as (topic, partition) pairs."""
    if not assignment:
        return []
    return sorted((t["topic_name"], p) for t in assignment["topic_partitions"] for p in t["partitions"])


def _assigned(assignment: bytes) -> list[tuple[str, int]]:
    """The partitions in a consumer protocol Assignment (version, [topic, [partition]], user data)."""
    data = bytes(assignment)
    if len(data) < 6:
        return []
    try:
        pos, found = 2, []
        (topics,) = struct.unpack_from(">i", data, pos)
        pos += 4
        for _ in range(max(topics, 0)):
            (n,) = struct.unpack_from(">h", data, pos)
            topic = data[pos + 2:pos + 2 + n].decode()
            pos += 2 + n
            (count,) = struct.unpack_from(">i", data, pos)
            found += [(topic, p) for p in struct.unpack_from(f">{count}i", data, pos + 4)]
            pos += 4 + 4 * count
        return found
    except (struct.error, UnicodeDecodeError):  # not the consumer protocol's layout: no partitions to show
        return []


def min_insync_replicas(configs: list[dict]) -> int:
    """min.insync.replicas among a topic's configs (1 if they do not say)."""
    return int(next((c["value"] for c in configs if c["name"] == "min.insync.replicas"), None) or 1)
