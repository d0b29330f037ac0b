"""The wire ceiling: a Kafka server that does as little as a client allows.

It speaks the same protocol versions as Moldau through the same codec
(``protocol``), on the same event loop (uvloop), but keeps record batches in
memory as they arrived: no CRC check, no validation, no files, no indexes.
A batch's base offset is rewritten in place and the batch is kept, so a
consumer reads back exactly what was produced. Whatever Moldau loses against
this server is what its storage and validation cost.

With ``--log-dir`` it is the *replicated* ceiling instead: each partition's batches are written to a file
(through the page cache, as a Kafka log's are; no index, no CRC check) and read back from it. With
``--replicas 3`` it starts two more nodes (``--peer``), each a process of its own, and partition i is led
by node i % 3: its leader sends each Produce's records over loopback TCP to the other two, which write
them to files of their own and acknowledge; an acks=all Produce is answered once both have, and the
requests behind it are handled meanwhile. That is the least work a replicated acks=all write can do --
every copy through a page cache, one round trip to the followers, leadership spread as a cluster's is --
so the ratio of its RF=3 and RF=1 rates is the most a cluster can reach on the machine (bench/cluster.py).

Run: ``python -m bench.ceiling --port 9092 [--log-dir DIR [--replicas 3]]``.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import struct
import sys
import uuid
from pathlib import Path
from bisect import bisect_right
from collections import deque

import uvloop

from broker.handlers import HANDLERS as MOLDAU_HANDLERS
from protocol import codec
from protocol.frames import API_KEYS, API_NAMES, FrameDecoder, decode_request_header, response_chunks

_BASE_OFFSET = struct.Struct(">q")
_LENGTH = struct.Struct(">i")
_LAST_OFFSET_DELTA = struct.Struct(">i")
_LAST_OFFSET_DELTA_AT = 23
_LOG_OVERHEAD = 12
_UNSUPPORTED_VERSION = 35
_ALL_OPERATIONS = -2147483648

# APIs Moldau does not serve (yet) that producers need, at versions clients use
_EXTRA_VERSIONS = {"InitProducerId": (0, 4), "FindCoordinator": (0, 4), "AddPartitionsToTxn": (0, 3), "EndTxn": (0, 3)}


class Partition:
    __slots__ = ("bases", "batches", "end", "fd", "size")

    def __init__(self, path: Path | None = None):
        self.bases: list[int] = []
        self.batches: list = []  # in memory; or, with a file, where each batch starts in it
        self.end = 0
        self.fd = None if path is None else os.open(path, os.O_CREAT | os.O_RDWR | os.O_APPEND, 0o644)
        self.size = 0  # of the file

    def append(self, records) -> int:
        """Stamp offsets on the batches in ``records`` (a writable buffer) and keep them."""
        first = self.end
        pos, size = 0, len(records)
        while pos + _LOG_OVERHEAD <= size:
            length = _LOG_OVERHEAD + _LENGTH.unpack_from(records, pos + 8)[0]
            (delta,) = _LAST_OFFSET_DELTA.unpack_from(records, pos + _LAST_OFFSET_DELTA_AT)
            _BASE_OFFSET.pack_into(records, pos, self.end)
            self.bases.append(self.end)
            self.batches.append(self.size + pos if self.fd is not None else records[pos : pos + length])
            self.end += delta + 1
            pos += length
        if self.fd is not None:
            os.write(self.fd, records)
            self.size += size
        return first

    def read(self, offset: int, max_bytes: int) -> bytes:
        """Whole batches from the one holding ``offset``; the first one even if it is larger than max_bytes."""
        i = max(bisect_right(self.bases, offset) - 1, 0)
        if self.fd is not None:
            start = self.batches[i]
            ends = itertools.chain(itertools.islice(self.batches, i + 1, None), (self.size,))
            stop = next(ends)  # the first batch, however large
            for end in ends:
                if end - start > max_bytes:
                    break
                stop = end
            return os.pread(self.fd, stop - start, start)
        out, total = [], 0
        for batch in itertools.islice(self.batches, i, None):
            if out and total + len(batch) > max_bytes:
                break
            out.append(batch)
            total += len(batch)
        return b"".join(out)


class Topic:
    __slots__ = ("name", "topic_id", "partitions")

    def __init__(self, name: str, count: int, log_dir: Path | None, topic_id: uuid.UUID | None = None):
        self.name = name
        self.topic_id = topic_id or uuid.uuid4()
        self.partitions = [Partition(log_dir and log_dir / f"{name}-{i}.log") for i in range(count)]


class Store:
    """Topics (in memory, or in files under ``log_dir``), the fetches waiting for an append, and -- in a
    replicated ceiling -- where every node listens and the links to the others."""

    def __init__(self, host: str, port: int, log_dir: Path | None = None):
        self.host, self.port = host, port
        self.log_dir = log_dir
        self.node_id = 0
        self.nodes: list[int] = [port]  # each node's Kafka port, by node id
        self.peers: list[PeerLink] = []
        self.children: list = []  # the peer processes node 0 started
        self.topics: dict[str, Topic] = {}
        self.by_id: dict[uuid.UUID, Topic] = {}
        self.waiters: set[asyncio.Future] = set()
        self.producer_ids = itertools.count(1000)

    def create(self, name: str, count: int, topic_id: uuid.UUID | None = None) -> Topic:
        topic = self.topics[name] = Topic(name, max(count, 1), self.log_dir, topic_id)
        self.by_id[topic.topic_id] = topic
        return topic

    def lookup(self, name, topic_id) -> Topic | None:
        return self.topics.get(name) if name else self.by_id.get(topic_id)

    def appended(self) -> None:
        for fut in self.waiters:
            if not fut.done():
                fut.set_result(None)
        self.waiters.clear()

    async def wait(self, seconds: float) -> None:
        fut = asyncio.get_running_loop().create_future()
        self.waiters.add(fut)
        try:
            await asyncio.wait_for(fut, seconds)
        except asyncio.TimeoutError:
            self.waiters.discard(fut)

    async def link(self, node_id: int, nodes: list[tuple[int, int]]) -> None:
        """Become node ``node_id`` of the replicated ceiling whose nodes listen on ``nodes`` ((Kafka port,
        replica port) by node id), linked to each of the others' replica port."""
        self.node_id, self.nodes = node_id, [kafka for kafka, _ in nodes]
        loop = asyncio.get_running_loop()
        self.peers = [(await loop.create_connection(PeerLink, self.host, replica))[1]
                      for n, (_, replica) in enumerate(nodes) if n != node_id]

    def tell_peers(self, kind: bytes, chunks: list) -> asyncio.Future:
        """A frame to every other node; done once each has acted on it."""
        return asyncio.gather(*(link.send(kind, chunks) for link in self.peers))


class PeerLink(asyncio.Protocol):
    """A node's connection to another's replica port: length-prefixed frames out (a kind byte, then a Produce's
    records or a new topic), one byte back for each frame done (TCP keeps them in order)."""

    def __init__(self):
        self.transport = None
        self.acks: deque[asyncio.Future] = deque()

    def connection_made(self, transport):
        self.transport = transport

    def data_received(self, data):
        for _ in range(len(data)):
            self.acks.popleft().set_result(None)

    def connection_lost(self, exc):
        while self.acks:
            self.acks.popleft().set_exception(ConnectionError("a node of the replicated ceiling went away"))

    def send(self, kind: bytes, chunks: list) -> asyncio.Future:
        ack = asyncio.get_running_loop().create_future()
        self.acks.append(ack)
        self.transport.writelines([_LENGTH.pack(1 + sum(len(c) for c in chunks)), kind, *chunks])
        return ack


_RECORDS = b"R"
_TOPIC = b"T"


class Replica(asyncio.BufferedProtocol):
    """The follower's end of a PeerLink: records appended to a file of their own (one per leader), a new topic
    made here too, each frame then acknowledged."""

    def __init__(self, store: Store):
        self.store = store
        self.decoder = FrameDecoder(1 << 30)
        self.fd = None
        self.transport = None

    def connection_made(self, transport):
        self.transport = transport
        self.fd = os.open(self.store.log_dir / f"from-{transport.get_extra_info('peername')[1]}.log",
                          os.O_CREAT | os.O_WRONLY | os.O_APPEND, 0o644)

    def get_buffer(self, sizehint):
        return self.decoder.get_buffer()

    def buffer_updated(self, nbytes):
        frames = self.decoder.buffer_updated(nbytes)
        for frame in frames:
            if frame[:1] == _RECORDS:
                os.write(self.fd, frame[1:])
            else:  # a topic: its partition count, its id, its name
                name = bytes(frame[21:]).decode()
                if name not in self.store.topics:
                    self.store.create(name, _LENGTH.unpack_from(frame, 1)[0], uuid.UUID(bytes=bytes(frame[5:21])))
        if frames:
            self.transport.write(b"\x01" * len(frames))

    def connection_lost(self, exc):
        os.close(self.fd)


# --- handlers: request dict in, response dict out (or an awaitable of one) ----


def api_versions(store, request, version):
    keys = [{"api_key": API_KEYS[name], "min_version": lo, "max_version": hi} for name, (lo, hi) in VERSIONS.items()]
    return {"error_code": 0, "api_keys": sorted(keys, key=lambda k: k["api_key"]), "throttle_time_ms": 0}


def _partition_entries(store, topic):
    """Partition i is led by node i % nodes, and every node has a replica of it."""
    count = len(store.nodes)
    entries = []
    for i in range(len(topic.partitions)):
        replicas = [(i + n) % count for n in range(count)]
        entries.append({"error_code": 0, "partition_index": i, "leader_id": replicas[0], "leader_epoch": 0,
                        "replica_nodes": replicas, "isr_nodes": replicas, "offline_replicas": []})
    return entries


def metadata(store, request, version):
    wanted = request["topics"]
    if wanted is None:
        topics = list(store.topics.values())
    else:
        topics = [store.lookup(t["name"], t["topic_id"]) or store.create(t["name"], 1) for t in wanted]
    return {
        "throttle_time_ms": 0,
        "brokers": [{"node_id": n, "host": store.host, "port": port, "rack": None} for n, port in enumerate(store.nodes)],
        "cluster_id": "wire-ceiling",
        "controller_id": store.node_id,
        "topics": [{"error_code": 0, "name": t.name, "topic_id": t.topic_id, "is_internal": False,
                    "partitions": _partition_entries(store, t), "topic_authorized_operations": _ALL_OPERATIONS}
                   for t in topics],
        "cluster_authorized_operations": _ALL_OPERATIONS,
    }


def create_topics(store, request, version):
    results = []
    made = []
    for want in request["topics"]:
        topic = store.topics.get(want["name"]) or store.create(want["name"], want["num_partitions"])
        made.append(store.tell_peers(_TOPIC, [_LENGTH.pack(len(topic.partitions)), topic.topic_id.bytes,
                                              topic.name.encode()]))
        results.append({"name": topic.name, "topic_id": topic.topic_id, "error_code": 0, "error_message": None,
                        "num_partitions": len(topic.partitions), "replication_factor": len(store.nodes),
                        "configs": []})
    response = {"throttle_time_ms": 0, "topics": results}
    return _once(asyncio.gather(*made), response) if store.peers else response


def _once(done: asyncio.Future, response: dict) -> asyncio.Future:
    """``response``, once ``done`` is."""
    answered = asyncio.get_running_loop().create_future()
    done.add_done_callback(lambda d: answered.set_result(response) if d.exception() is None
                           else answered.set_exception(d.exception()))
    return answered


def produce(store, request, version):
    responses = []
    for data in request["topic_data"]:
        topic = store.topics.get(data["name"]) or store.create(data["name"], 1)
        parts = [{"index": p["index"], "error_code": 0, "log_append_time_ms": -1, "log_start_offset": 0,
                  "base_offset": topic.partitions[p["index"]].append(p["records"]), "record_errors": []}
                 for p in data["partition_data"]]
        responses.append({"name": topic.name, "partition_responses": parts})
    store.appended()
    response = None if request["acks"] == 0 else {"responses": responses, "throttle_time_ms": 0}
    if not store.peers:
        return response
    replicated = store.tell_peers(_RECORDS, [p["records"] for data in request["topic_data"]
                                             for p in data["partition_data"]])
    return _once(replicated, response) if request["acks"] == -1 else response


def _fetch_once(store, request):
    total = 0
    responses = []
    for want in request["topics"]:
        topic = store.lookup(want["topic"], want["topic_id"])
        parts = []
        for p in want["partitions"]:
            partition = topic.partitions[p["partition"]]
            records = b""
            if p["fetch_offset"] < partition.end:
                records = partition.read(p["fetch_offset"], p["partition_max_bytes"])
            total += len(records)
            parts.append({"partition_index": p["partition"], "error_code": 0, "high_watermark": partition.end,
                          "last_stable_offset": partition.end, "log_start_offset": 0,
                          "aborted_transactions": None, "preferred_read_replica": -1, "records": records})
        responses.append({"topic": topic.name, "topic_id": topic.topic_id, "partitions": parts})
    return {"throttle_time_ms": 0, "error_code": 0, "session_id": 0, "responses": responses}, total


def fetch(store, request, version):
    response, total = _fetch_once(store, request)
    if total or request["max_wait_ms"] <= 0:
        return response
    return _fetch_later(store, request)


async def _fetch_later(store, request):
    # an append may have landed between fetch() and this coroutine's first step:
    # look again before waiting, or that append's wake-up is lost
    response, total = _fetch_once(store, request)
    if not total:
        await store.wait(request["max_wait_ms"] / 1000)
        response, total = _fetch_once(store, request)
    return response


def list_offsets(store, request, version):
    topics = []
    for want in request["topics"]:
        partitions = store.topics[want["name"]].partitions
        topics.append({"name": want["name"], "partitions": [
            {"partition_index": p["partition_index"], "error_code": 0, "timestamp": -1, "leader_epoch": 0,
             "offset": partitions[p["partition_index"]].end if p["timestamp"] == -1 else 0}
            for p in want["partitions"]]})
    return {"throttle_time_ms": 0, "topics": topics}


def init_producer_id(store, request, version):
    return {"throttle_time_ms": 0, "error_code": 0, "producer_id": next(store.producer_ids), "producer_epoch": 0}


def find_coordinator(store, request, version):
    me = {"node_id": 0, "host": store.host, "port": store.port, "error_code": 0, "error_message": None}
    keys = request["coordinator_keys"] or [request["key"]]
    return {"throttle_time_ms": 0, **me, "coordinators": [{"key": k, **me} for k in keys]}


def add_partitions_to_txn(store, request, version):
    results = [{"name": t["name"], "results_by_partition": [
        {"partition_index": p, "partition_error_code": 0} for p in t["partitions"]]}
        for t in request["v3_and_below_topics"]]
    return {"throttle_time_ms": 0, "results_by_topic_v3_and_below": results}


def end_txn(store, request, version):
    return {"throttle_time_ms": 0, "error_code": 0}


HANDLERS = {
    "ApiVersions": api_versions,
    "Metadata": metadata,
    "CreateTopics": create_topics,
    "Produce": produce,
    "Fetch": fetch,
    "ListOffsets": list_offsets,
    "InitProducerId": init_producer_id,
    "FindCoordinator": find_coordinator,
    "AddPartitionsToTxn": add_partitions_to_txn,
    "EndTxn": end_txn,
}
_MOLDAU_VERSIONS = {h.name: (h.min_version, h.max_version) for h in MOLDAU_HANDLERS.values()}
VERSIONS = {name: _MOLDAU_VERSIONS.get(name) or _EXTRA_VERSIONS[name] for name in HANDLERS}


class Connection(asyncio.BufferedProtocol):
    """Answers requests in order; a fetch that waits for data holds back the ones after it, a Produce waiting
    for its followers holds back only their answers."""

    def __init__(self, store: Store):
        self.store = store
        self.decoder = FrameDecoder(1 << 30)
        self.backlog: deque = deque()
        self.waiting = False
        self.owed: deque = deque()  # (name, version, correlation id, answer or its future), in request order
        self.transport = None

    def connection_made(self, transport):
        self.transport = transport

    def connection_lost(self, exc):
        self.backlog.clear()
        self.transport = None

    def get_buffer(self, sizehint):
        return self.decoder.get_buffer()  # read in place, as Moldau's server does

    def buffer_updated(self, nbytes):
        self.backlog.extend(self.decoder.buffer_updated(nbytes))
        self.serve()

    def serve(self):
        while self.backlog and not self.waiting and self.transport is not None:
            frame = self.backlog.popleft()
            header = decode_request_header(frame)
            name = API_NAMES[header.api_key]
            version = header.api_version
            lo, hi = VERSIONS.get(name, (0, -1))
            if not lo <= version <= hi:
                # the v0 answer that tells an ApiVersions client which versions to use
                self.reply("ApiVersions", 0, header.correlation_id,
                           {**api_versions(self.store, None, 0), "error_code": _UNSUPPORTED_VERSION})
                continue
            request, _ = codec.decode(name + "Request", version, frame, header.body_offset)
            response = HANDLERS[name](self.store, request, version)
            if asyncio.iscoroutine(response):
                self.waiting = True
                response = asyncio.ensure_future(response)
                response.add_done_callback(self.fetched)
            elif isinstance(response, asyncio.Future):
                response.add_done_callback(self.answer)
            if response is not None:
                self.owed.append((name, version, header.correlation_id, response))
        self.answer()

    def fetched(self, _):
        self.waiting = False
        self.serve()

    def answer(self, _=None):
        """Write the answers that are ready, up to the first that is not."""
        while self.owed and not (isinstance(self.owed[0][3], asyncio.Future) and not self.owed[0][3].done()):
            name, version, correlation_id, body = self.owed.popleft()
            if isinstance(body, asyncio.Future):
                body = body.result()
            self.reply(name, version, correlation_id, body)

    def reply(self, name, version, correlation_id, body):
        if self.transport is not None:
            self.transport.writelines(response_chunks(name, version, correlation_id, body))


async def serve(host: str, port: int, log_dir: Path | None, replicas: int) -> None:
    store = Store(host, port, log_dir)
    if replicas > 1:
        await start_peers(store, replicas)
    server = await asyncio.get_running_loop().create_server(lambda: Connection(store), host, port,
                                                            reuse_address=True)
    async with server:
        await server.serve_forever()


async def start_peers(store: Store, replicas: int) -> None:
    """Node 0 of a replicated ceiling starts the others (``--peer``), each of which prints its two ports;
    then every node is told where all of them listen and links to the others. A peer ends when its
    standard input closes: with this process."""
    loop = asyncio.get_running_loop()
    replica_server = await loop.create_server(lambda: Replica(store), store.host, 0)
    nodes = [(store.port, replica_server.sockets[0].getsockname()[1])]
    for n in range(1, replicas):
        child = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bench.ceiling", "--peer", "--host", store.host, "--port", "0",
            "--log-dir", str(store.log_dir.parent / f"{store.log_dir.name}-node-{n}"),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE)
        nodes.append(tuple(int(port) for port in (await child.stdout.readline()).split()))
        store.children.append(child)
    where = " ".join(f"{kafka} {replica}" for kafka, replica in nodes)
    for n, child in enumerate(store.children, 1):
        child.stdin.write(f"{n} {where}\n".encode())
        await child.stdin.drain()
    await store.link(0, nodes)


async def peer(host: str, log_dir: Path) -> None:
    loop = asyncio.get_running_loop()
    store = Store(host, 0, log_dir)
    kafka = await loop.create_server(lambda: Connection(store), host, 0)
    replica_server = await loop.create_server(lambda: Replica(store), host, 0)
    store.port = kafka.sockets[0].getsockname()[1]
    print(store.port, replica_server.sockets[0].getsockname()[1], flush=True)
    stdin = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stdin), sys.stdin)
    node_id, *ports = (int(word) for word in (await stdin.readline()).split())
    await store.link(node_id, list(zip(ports[::2], ports[1::2], strict=True)))
    await stdin.read()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--log-dir", type=Path, help="write each partition's batches to a file here")
    parser.add_argument("--replicas", type=int, default=1,
                        help="with --log-dir: nodes, each partition on all of them (node i %% nodes leading partition i)")
    parser.add_argument("--peer", action="store_true", help="a node that the first node of a replicated ceiling starts")
    args = parser.parse_args()
    if (args.replicas > 1 or args.peer) and args.log_dir is None:
        parser.error("--replicas needs --log-dir")
    if args.log_dir is not None:
        args.log_dir.mkdir(parents=True, exist_ok=True)
    uvloop.run(peer(args.host, args.log_dir) if args.peer else serve(args.host, args.port, args.log_dir,
                                                                    args.replicas))


if __name__ == "__main__":
    main()
