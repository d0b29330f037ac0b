"""The wire ceiling: a Kafka server that does as little as a client allows.

It speaks the same protocol versions as Moldau through the same codec
(``protocol``), on the same event loop (uvloop), but keeps record batches in
memory as they arrived: no CRC check, no validation, no files, no indexes.
A batch's base offset is rewritten in place and the batch is kept, so a
consumer reads back exactly what was produced. Whatever Moldau loses against
this server is what its storage and validation cost.

Run: ``python -m bench.ceiling --port 9092``.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import struct
import uuid
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
    __slots__ = ("bases", "batches", "end")

    def __init__(self):
        self.bases: list[int] = []
        self.batches: list = []
        self.end = 0

    def append(self, records) -> int:
        """Stamp offsets on the batches in ``records`` (a writable buffer) and keep them."""
        first = self.end
        pos, size = 0, len(records)
        while pos + _LOG_OVERHEAD <= size:
            length = _LOG_OVERHEAD + _LENGTH.unpack_from(records, pos + 8)[0]
            (delta,) = _LAST_OFFSET_DELTA.unpack_from(records, pos + _LAST_OFFSET_DELTA_AT)
            _BASE_OFFSET.pack_into(records, pos, self.end)
            self.bases.append(self.end)
            self.batches.append(records[pos : pos + length])
            self.end += delta + 1
            pos += length
        return first

    def read(self, offset: int, max_bytes: int) -> bytes:
        """Whole batches from the one holding ``offset``; the first one even if it is larger than max_bytes."""
        i = max(bisect_right(self.bases, offset) - 1, 0)
        out, total = [], 0
        for batch in itertools.islice(self.batches, i, None):
            if out and total + len(batch) > max_bytes:
                break
            out.append(batch)
            total += len(batch)
        return b"".join(out)


class Topic:
    __slots__ = ("name", "topic_id", "partitions")

    def __init__(self, name: str, count: int):
        self.name = name
        self.topic_id = uuid.uuid4()
        self.partitions = [Partition() for _ in range(count)]


class Store:
    """Topics in memory, and the fetches waiting for an append."""

    def __init__(self, host: str, port: int):
        self.host, self.port = host, port
        self.topics: dict[str, Topic] = {}
        self.by_id: dict[uuid.UUID, Topic] = {}
        self.waiters: set[asyncio.Future] = set()
        self.producer_ids = itertools.count(1000)

    def create(self, name: str, count: int) -> Topic:
        topic = self.topics[name] = Topic(name, max(count, 1))
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


# --- handlers: request dict in, response dict out (or an awaitable of one) ----


def api_versions(store, request, version):
    keys = [{"api_key": API_KEYS[name], "min_version": lo, "max_version": hi} for name, (lo, hi) in VERSIONS.items()]
    return {"error_code": 0, "api_keys": sorted(keys, key=lambda k: k["api_key"]), "throttle_time_ms": 0}


def _partition_entries(store, topic):
    node = [0]
    return [{"error_code": 0, "partition_index": i, "leader_id": 0, "leader_epoch": 0, "replica_nodes": node,
             "isr_nodes": node, "offline_replicas": []} for i in range(len(topic.partitions))]


def metadata(store, request, version):
    wanted = request["topics"]
    if wanted is None:
        topics = list(store.topics.values())
    else:
        topics = [store.lookup(t["name"], t["topic_id"]) or store.create(t["name"], 1) for t in wanted]
    return {
        "throttle_time_ms": 0,
        "brokers": [{"node_id": 0, "host": store.host, "port": store.port, "rack": None}],
        "cluster_id": "wire-ceiling",
        "controller_id": 0,
        "topics": [{"error_code": 0, "name": t.name, "topic_id": t.topic_id, "is_internal": False,
                    "partitions": _partition_entries(store, t), "topic_authorized_operations": _ALL_OPERATIONS}
                   for t in topics],
        "cluster_authorized_operations": _ALL_OPERATIONS,
    }


def create_topics(store, request, version):
    results = []
    for want in request["topics"]:
        topic = store.topics.get(want["name"]) or store.create(want["name"], want["num_partitions"])
        results.append({"name": topic.name, "topic_id": topic.topic_id, "error_code": 0, "error_message": None,
                        "num_partitions": len(topic.partitions), "replication_factor": 1, "configs": []})
    return {"throttle_time_ms": 0, "topics": results}


def produce(store, request, version):
    responses = []
    for data in request["topic_data"]:
        topic = store.topics.get(data["name"]) or store.create(data["name"], 1)
        parts = [{"index": p["index"], "error_code": 0, "log_append_time_ms": -1, "log_start_offset": 0,
                  "base_offset": topic.partitions[p["index"]].append(p["records"]), "record_errors": []}
                 for p in data["partition_data"]]
        responses.append({"name": topic.name, "partition_responses": parts})
    store.appended()
    return None if request["acks"] == 0 else {"responses": responses, "throttle_time_ms": 0}


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
    """Answers requests in order; a fetch that waits for data holds back the ones after it."""

    def __init__(self, store: Store):
        self.store = store
        self.decoder = FrameDecoder(1 << 30)
        self.backlog: deque = deque()
        self.waiting = False
        self.pending: asyncio.Future | None = None  # the answer being awaited (held, so it is not collected)
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
                self.pending = asyncio.ensure_future(self.finish(name, version, header.correlation_id, response))
            elif response is not None:
                self.reply(name, version, header.correlation_id, response)

    async def finish(self, name, version, correlation_id, pending):
        self.reply(name, version, correlation_id, await pending)
        self.waiting = False
        self.serve()

    def reply(self, name, version, correlation_id, body):
        if self.transport is not None:
            self.transport.writelines(response_chunks(name, version, correlation_id, body))


async def serve(host: str, port: int) -> None:
    store = Store(host, port)
    server = await asyncio.get_running_loop().create_server(lambda: Connection(store), host, port,
                                                            reuse_address=True)
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    uvloop.run(serve(args.host, args.port))


if __name__ == "__main__":
    main()
