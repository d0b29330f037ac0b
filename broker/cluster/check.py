"""`moldau cluster check`: is every broker's view of the cluster etcd's?

Reads the cluster's keys from etcd (live brokers, controller, topics, partition states) and asks
every broker for its Metadata, then compares: the live brokers, the controller, the topics and each
partition's leader, leader epoch, replicas and ISR. A broker that differs is named with what differs.
Views move while they are read, so a difference counts only if it is still there a moment later.
Exits 0 when all agree, 1 when a broker differs, 2 when etcd or a broker cannot be read.
"""

from __future__ import annotations

import asyncio
import json
import sys

import aetcd

from broker.admin.client import AdminClient, AdminError
from storage import clock

from .etcd_session import grpc_target, parse_connect

RECHECK_S = 2.0

View = dict  # {"brokers": [ids], "controller": id, "topics": {name: {partition: (leader, epoch, replicas, isr)}}}


def view_from_metadata(metadata: dict) -> View:
    """A broker's view, from its Metadata answer (every topic)."""
    return {
        "brokers": sorted(b["node_id"] for b in metadata["brokers"]),
        "controller": metadata["controller_id"],
        "topics": {t["name"]: {p["partition_index"]: (p["leader_id"], p["leader_epoch"], list(p["replica_nodes"]),
                                                       list(p["isr_nodes"])) for p in t["partitions"]}
                   for t in metadata["topics"]},
    }


def view_from_etcd(keys: dict[str, bytes]) -> View:
    """The view etcd's keys (relative to the chroot, e.g. "topics/t") make, as a broker answers it."""
    values = {k: json.loads(v) for k, v in keys.items() if k.startswith(("brokers/ids/", "topics/", "partitions/"))
              or k == "controller"}
    counts = {k.split("/")[1]: v["partitions"] for k, v in values.items() if k.startswith("topics/")}
    view: View = {
        "brokers": sorted(int(k.rsplit("/", 1)[1]) for k in values if k.startswith("brokers/ids/")),
        "controller": values["controller"]["broker_id"] if "controller" in values else -1,
        "topics": {name: {} for name in counts},
    }
    for k, v in values.items():
        if k.startswith("partitions/"):
            _, topic, index = k.split("/")
            if topic in counts and int(index) < counts[topic]:  # (a create's states before its topic key)
                view["topics"][topic][int(index)] = (v["leader"], v["leader_epoch"], v["replicas"], v["isr"])
    return view


def differences(etcd: View, broker: View) -> list[str]:
    """What a broker's view has other than etcd's, one line each."""
    found = [f"{what}: {broker[what]}, etcd {etcd[what]}" for what in ("brokers", "controller")
             if broker[what] != etcd[what]]
    for name in sorted(etcd["topics"].keys() | broker["topics"].keys()):
        if name not in broker["topics"]:
            found.append(f"topic {name}: missing")
        elif name not in etcd["topics"]:
            found.append(f"topic {name}: not in etcd")
        else:
            ours, theirs = broker["topics"][name], etcd["topics"][name]
            found += [f"{name}-{p}: {ours.get(p)}, etcd {theirs.get(p)}"
                      for p in sorted(ours.keys() | theirs.keys()) if ours.get(p) != theirs.get(p)]
    return found


async def _read_etcd(connect: str) -> dict[str, bytes]:
    endpoints, chroot = parse_connect(connect)
    client = aetcd.Client(*grpc_target(endpoints), timeout=10)
    try:
        found = await client.get_prefix((chroot + "/").encode())
    finally:
        await client.close()
    return {kv.key.decode()[len(chroot) + 1:]: kv.value for kv in found}


def _every_topic(version: int) -> dict:
    return {"topics": [] if version == 0 else None, "allow_auto_topic_creation": False}


async def _divergent(connect: str, admin: AdminClient) -> tuple[list[int], dict[int, list[str]]]:
    """(the brokers asked, the differing ones' differences)."""
    etcd = view_from_etcd(await _read_etcd(connect))
    await admin.metadata([])  # the brokers' addresses
    # the live brokers are etcd's (a broker may still list one that is gone); their addresses the bootstrap's
    found = {node: differences(etcd, view_from_metadata(await admin.send("Metadata", _every_topic, node)))
             if node in admin.brokers else ["not in the bootstrap broker's Metadata: not asked"]
             for node in etcd["brokers"]}
    return etcd["brokers"], {node: lines for node, lines in found.items() if lines}


async def _check(etcd_connect: str, bootstrap: str, timeout_s: float) -> tuple[list[int], dict[int, list[str]]]:
    async with AdminClient(bootstrap, timeout_s=timeout_s) as admin:
        asked, divergent = await _divergent(etcd_connect, admin)
        if divergent:  # (a change on its way through the watches)
            await clock.sleep(RECHECK_S)
            asked, divergent = await _divergent(etcd_connect, admin)
    return asked, divergent


def run(etcd_connect: str, bootstrap: str, timeout_s: float = 10.0) -> int:
    try:
        asked, divergent = asyncio.run(_check(etcd_connect, bootstrap, timeout_s))
    except (AdminError, aetcd.exceptions.ClientError, ValueError) as exc:
        print(f"moldau cluster check: {exc}", file=sys.stderr)
        return 2
    for node in sorted(asked):
        print(f"broker {node}: " + ("differs from etcd:\n  " + "\n  ".join(divergent[node]) if node in divergent
                                    else "same view as etcd"))
    return 1 if divergent else 0
