"""Replica fetchers: one per source broker, fetching the partitions this broker follows there.

They speak Kafka's Fetch (v15: ReplicaState carries this broker's id) and
append what the leader sends byte for byte. A leader that answers with a
diverging epoch (KIP-595's check of last_fetched_epoch, which carries
KIP-101/KIP-279's truncation into the fetch itself) makes the follower
truncate its log to where it last agreed with the leader before it fetches
on. Each fetcher keeps an incremental fetch session with its leader
(fetch_session_handler.py): after the first request, only partitions whose
position moved are named, and only those with news are answered. The fetcher
keeps each partition's request entry and rebuilds only those whose logs told
it of a change (``Log.watchers``), so an idle fetch of thousands of
partitions looks at none of them.
"""

from __future__ import annotations

import asyncio
import logging
from functools import partial

from broker.cluster import stages
from broker.errors import ErrorCode
from protocol import codec
from protocol.records import valid_prefix
from storage import clock
from storage.errors import OffsetOutOfRange

from .fetch_session_handler import FetchSessionHandler
from .network import BrokerConnection

log = logging.getLogger("moldau.fetcher")

FETCH_VERSION = 15
RETRY_BACKOFF_S = 0.2


class ReplicaFetcherManager:
    """The fetchers, one supervised task per source broker (Kafka's ReplicaFetcherThread-0-<leader>). The
    partitions fetched from a leader are the manager's: a fetcher that failed is replaced by a new one (a new
    connection, a new fetch session) that takes them over."""

    def __init__(self, broker) -> None:
        self.broker = broker
        self.fetchers: dict[int, ReplicaFetcher] = {}  # the fetcher now running for each source broker
        self.partitions: dict[int, dict[tuple[str, int], object]] = {}  # source broker -> partitions fetched there
        self.leader_of: dict[tuple[str, int], int] = {}
        self.closed = False

    def add(self, key: tuple[str, int], partition, leader: int) -> None:
        if self.closed:  # shutting down: a leadership handed over now must not start a fetcher nothing stops
            return
        old = self.leader_of.get(key)
        if old is not None and old != leader:
            self.partitions[old].pop(key, None)
            self._changed(old, key)
        self.leader_of[key] = leader
        if leader not in self.partitions:
            self.partitions[leader] = {}
            self.broker.supervisor.start(fetcher_name(leader), lambda: self._fetch_from(leader))
        self.partitions[leader][key] = partition
        self._changed(leader, key)
        if leader in self.fetchers:
            self.fetchers[leader].wake.set()

    def remove(self, key: tuple[str, int]) -> None:
        leader = self.leader_of.pop(key, None)
        if leader is not None:
            self.partitions[leader].pop(key, None)
            self._changed(leader, key)
            if leader in self.fetchers:
                self.fetchers[leader].lag.pop(key, None)

    def _changed(self, leader: int, key: tuple[str, int]) -> None:
        if leader in self.fetchers:
            self.fetchers[leader].dirty.add(key)

    async def _fetch_from(self, leader: int) -> None:
        fetcher = self.fetchers[leader] = ReplicaFetcher(self.broker, leader, self.partitions[leader])
        try:
            await fetcher.run()
        finally:
            fetcher.close()

    def max_lag(self) -> int:
        """Records the most lagging partition fetched here is behind its leader's high watermark (Kafka's
        ReplicaFetcherManager MaxLag)."""
        return max((lag for f in self.fetchers.values() for key, lag in f.lag.items() if key in f.partitions),
                   default=0)

    def shutdown(self) -> None:
        self.closed = True
        for fetcher in self.fetchers.values():
            fetcher.stopped = True
        for leader in self.partitions:
            self.broker.supervisor.stop(fetcher_name(leader))
        for fetcher in self.fetchers.values():
            fetcher.close()


def fetcher_name(leader: int) -> str:
    return f"ReplicaFetcherThread-0-{leader}"


class ReplicaFetcher:
    def __init__(self, broker, leader_id: int, partitions: dict[tuple[str, int], object]) -> None:
        self.broker = broker
        self.leader_id = leader_id
        self.partitions = partitions
        self.lag: dict[tuple[str, int], int] = {}  # records behind the leader's high watermark, after each fetch
        self.wake = asyncio.Event()
        self.session = FetchSessionHandler()
        # each partition's request entry, keyed by the session's (topic id, partition), and the fetch state it
        # was made from; the partitions whose entries may be out of date (their logs tell: an append, a
        # truncation, a new leadership state, a log start moved), so an idle fetch rebuilds none of them
        self.entries: dict[tuple[str, int], tuple[tuple, dict, tuple]] = {}
        self.wanted: dict[tuple, dict] = {}
        self.dirty: set[tuple[str, int]] = set(partitions)
        self._watched: dict[tuple[str, int], object] = {}
        self._max_bytes = None
        self.connection = BrokerConnection(f"moldau-replica-fetcher-{broker.node_id}", broker.store.client_security)
        # the shutdown sets it too: a cancellation can be lost (one arriving as an awaited call completes), and a
        # fetcher that goes on fetching from a live leader would keep the shutdown waiting for its task
        self.stopped = False

    async def run(self) -> None:
        config = self.broker.config
        wait_ms = config["replica.fetch.wait.max.ms"]
        failing = False
        while not self.stopped:
            if not self.partitions:
                self.wake.clear()
                await self.wake.wait()
                continue
            leader = self.broker.store.cache.brokers.get(self.leader_id)
            request = self._request(wait_ms, config["replica.fetch.max.bytes"]) if leader else None
            if request is None:
                await clock.sleep(RETRY_BACKOFF_S)
                continue
            try:
                response = await self.connection.request((leader.host, leader.port), "Fetch", FETCH_VERSION,
                                                         request, wait_ms / 1000 + 10)
            except asyncio.CancelledError:
                raise
            except (OSError, EOFError, asyncio.TimeoutError, asyncio.IncompleteReadError, codec.DecodeError) as exc:
                if not failing:
                    log.warning("fetching from broker %d failed: %s", self.leader_id, exc or type(exc).__name__)
                failing = True
                self.broker.store.peer_connection_failed(self.leader_id, exc)
                self.session.start_over()
                await clock.sleep(RETRY_BACKOFF_S)
                continue
            failing = False
            if delay := self.broker.slow_disk.delay_s():
                await clock.sleep(delay)
            if self._handle(response):
                await clock.sleep(RETRY_BACKOFF_S)  # errors: wait for the metadata to move on

    def close(self) -> None:
        for log_ in self._watched.values():
            log_.watchers.pop(self, None)
        self._watched.clear()
        self.connection.close()

    def _watch(self, key: tuple[str, int], log_) -> None:
        old = self._watched.pop(key, None)
        if old is not None and old is not log_:
            old.watchers.pop(self, None)
        if log_ is not None:
            log_.watchers[self] = partial(self.dirty.add, key)
            self._watched[key] = log_

    def _refresh(self, max_bytes: int) -> set[tuple]:
        """Rebuild the entries of the dirty partitions; the session keys whose entries changed or went."""
        if max_bytes != self._max_bytes:  # replica.fetch.max.bytes changed: every entry says it
            self._max_bytes = max_bytes
            self.dirty.update(self.entries, self.partitions)
        touched = set()
        trace = stages.on()
        dirty = list(self.dirty)
        self.dirty.clear()  # (cleared, not replaced: the logs' watchers add to this set)
        for key in dirty:
            old = self.entries.pop(key, None)
            if old is not None:
                touched.add(old[0])
                del self.wanted[old[0]]
            partition = self.partitions.get(key)
            topic = self.broker.logs.topic(key[0]) if partition is not None else None
            if topic is None:
                self._watch(key, None)
                if partition is not None:
                    self.dirty.add(key)  # not known here yet: asked again at the next fetch
                continue
            log_ = partition.log
            self._watch(key, log_)
            if trace:
                stages.mark("fetch-sent", key[0], key[1], log_.log_end_offset)
            session_key = (topic.topic_id, key[1])
            entry = {
                "partition": key[1],
                "current_leader_epoch": partition.leader_epoch,
                "fetch_offset": log_.log_end_offset,
                "last_fetched_epoch": log_.leader_epochs.latest_epoch,
                "log_start_offset": log_.log_start_offset,
                "partition_max_bytes": max_bytes,
            }
            self.entries[key] = (session_key, entry, _fetch_state(partition))
            self.wanted[session_key] = entry
            touched.add(session_key)
        return touched

    def _request(self, wait_ms: int, max_bytes: int) -> dict | None:
        """The next Fetch request (None if there is nothing to fetch here)."""
        touched = self._refresh(max_bytes)
        if not self.wanted:
            return None
        return {
            "cluster_id": None,
            "replica_id": -1,
            "replica_state": {"replica_id": self.broker.node_id, "replica_epoch": -1},
            "max_wait_ms": wait_ms,
            "min_bytes": 1,
            "max_bytes": 10 * max_bytes,
            "isolation_level": 0,
            **self.session.build(self.wanted, touched),
            "rack_id": "",
        }

    def _handle(self, response: dict) -> bool:
        """Apply a fetch response; True if it or a partition answered with an error. A partition whose
        answer is not applied as sent (dropped, an error, a truncation) gets a FULL request next, so the
        leader's session tells everything about it again (its high watermark too)."""
        self.session.handle_response(response)
        errors = response["error_code"] != ErrorCode.NONE
        if errors:  # the leader lost the session (a restart, an eviction) or its epoch
            log.info("fetch session with broker %d: %s: the next fetch is a full one", self.leader_id,
                     ErrorCode(response["error_code"]).name)
        clean = True
        now = clock.wall_ms()
        for topic_response in response["responses"]:
            topic = self.broker.logs.topic_by_id(topic_response["topic_id"])
            if topic is None:
                continue
            for p in topic_response["partitions"]:
                key = (topic.name, p["partition_index"])
                partition = self.partitions.get(key)
                if partition is None:
                    continue  # no longer fetched from here: the next request forgets it
                # the partition moved on while the request was out (a new leader epoch, a truncation, a
                # role change and back): the answer is to a question no longer asked (as Kafka drops it)
                if key in self.dirty and (key not in self.entries or
                                          self.entries[key][2] != _fetch_state(partition)):
                    clean = False
                    continue
                applied, failed = self._apply(partition, p, now)
                clean = clean and applied
                errors = errors or failed
        if not clean:
            self.session.start_over()
        return errors

    def _apply(self, partition, p: dict, now: int) -> tuple[bool, bool]:
        """(appended as sent, failed) for one partition's answer."""
        code = p["error_code"]
        if code == ErrorCode.OFFSET_OUT_OF_RANGE:
            return False, not self._out_of_range(partition, p)
        if code != ErrorCode.NONE:
            return False, True
        diverging = p.get("diverging_epoch")
        if diverging is not None and diverging["end_offset"] >= 0:
            return False, not self._truncate(partition, diverging["epoch"], diverging["end_offset"])
        try:
            self._append(partition, p, now)
        except Exception as exc:  # noqa: BLE001 -- a full disk, a batch out of place: fetch again from the log end
            log.error("%s-%d: could not append the leader's batches: %s", partition.topic, partition.index, exc)
            return False, True
        return True, False

    def _append(self, partition, p: dict, now: int) -> None:
        log_ = partition.log
        records = p["records"]
        if records:
            buf = memoryview(records)  # the response's bytes, stored as they are: no copy of a megabyte
            batches, end, _ = valid_prefix(buf)
            if batches:
                stages.mark("received", partition.topic, partition.index, batches[-1][1].next_offset)
            if batches and log_.log_end_offset == log_.log_start_offset and \
                    batches[0][1].base_offset < log_.log_end_offset < batches[0][1].next_offset:
                # an empty log that starts inside the leader's first batch (DeleteRecords cut it): it begins
                # at the batch instead, and its log start moves up again below (as Kafka's follower does)
                self.broker.logs.truncate_fully_and_start_at(partition.topic, partition.index,
                                                             batches[0][1].base_offset)
            batches = [(pos, hdr) for pos, hdr in batches if hdr.base_offset >= log_.log_end_offset]
            if batches:
                first = batches[0][0]
                data = buf[first:end]
                log_.append_as_follower(data, [(pos - first, hdr) for pos, hdr in batches], now)
        log_.set_high_watermark(min(p["high_watermark"], log_.log_end_offset))
        self.lag[(partition.topic, partition.index)] = max(p["high_watermark"] - log_.log_end_offset, 0)
        # DeleteRecords and retention on the leader move the start on every replica (Kafka's
        # maybeIncrementLogStartOffset), never past what this replica knows to be committed
        if p["log_start_offset"] > log_.log_start_offset:
            self.broker.logs.advance_log_start(partition.topic, partition.index,
                                               min(p["log_start_offset"], log_.high_watermark))
        self.broker.notify_append(partition.topic, partition.index)

    def _truncate(self, partition, leader_epoch: int, leader_end: int) -> bool:
        """Cut the divergent tail: keep what this log has up to where its last epoch shared with the leader
        ended in both logs. False if nothing could be cut (the next fetch then waits a little)."""
        log_ = partition.log
        offset = min(leader_end, log_.log_end_offset)
        if leader_epoch >= 0:
            epoch, end = log_.leader_epochs.end_offset_for(leader_epoch, log_.log_end_offset)
            if epoch >= 0:
                offset = min(offset, end)
        before = log_.log_end_offset, log_.leader_epochs.latest_epoch
        try:
            log_.truncate_to(max(offset, log_.log_start_offset))
        except OffsetOutOfRange as exc:
            log.error("%s-%d: cannot truncate: %s", partition.topic, partition.index, exc)
            return False
        log.info("%s-%d: truncated the divergent tail from offset %d: log end %d -> %d (leader epoch %d ended at %d)",
                 partition.topic, partition.index, offset, before[0], log_.log_end_offset, leader_epoch, leader_end)
        return (log_.log_end_offset, log_.leader_epochs.latest_epoch) != before

    def _out_of_range(self, partition, p: dict) -> bool:
        """The leader no longer has (DeleteRecords, retention) or does not have (a tail the epochs did not
        catch) this log's end: as Kafka's follower, start over at the leader's log start, or cut the tail to
        the leader's high watermark. False if that changed nothing (the next fetch then waits a little)."""
        log_ = partition.log
        leader_start = p["log_start_offset"]
        before = log_.log_end_offset
        if before < leader_start:
            self.broker.logs.truncate_fully_and_start_at(partition.topic, partition.index, leader_start)
        else:
            log_.truncate_to(max(min(p["high_watermark"], before), log_.log_start_offset))
            if log_.log_end_offset == before:
                return False
        log.info("%s-%d: fetch offset %d out of the leader's range (its log start %d): log now %d..%d",
                 partition.topic, partition.index, before, leader_start, log_.log_start_offset,
                 log_.log_end_offset)
        return True


def _fetch_state(partition) -> tuple:
    """What a fetch request for ``partition`` was made from; a response applies only while it is unchanged."""
    return partition.log, partition.leader_epoch, partition.log.log_end_offset
