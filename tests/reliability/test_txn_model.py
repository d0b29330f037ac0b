"""Model-based test of transactions: every read_committed fetch, from every start offset, against a model.

Random transactional (one of them speaking transaction version 2),
idempotent and plain writers (raw requests, one at a time) on a few
partitions with tiny segments: transactions over random
partition sets, offsets sent to transactions (and plain offset commits of
the same group), commits, aborts, a new incarnation fencing an open
transaction, zombie writes and EndTxns of fenced epochs, idempotent retries
and epoch bumps, the hostile writes of issue 15, and kill -9 restarts --
some right after an EndTxn, before its markers are out. The model keeps each
partition's batches, open transactions and aborted ones; markers are taken
from the log (after the coordinator says the transaction is complete) only if
they are what the model expects there.

At every check (every CHECK_EVERY steps and at the end), for each partition: the high watermark and last stable
offset agree with the model (Fetch, ListOffsets); the read_uncommitted log is
the model's batch for batch; and for every start offset, one read_committed
fetch of a random size returns no batch at or past the LSO, exactly the
aborted transactions the model has in the range it returned, and, filtered
as a Kafka consumer filters, exactly the committed and plain records of that
range. A full chain of fetches from the log start reaches the LSO. The
group's offsets, fetched for all partitions and for named ones, with and
without require_stable, in OffsetFetch v7 and v8, are the model's: pending
ones UNSTABLE_OFFSET_COMMIT, a committed transaction's counting unless a
later commit has.

MOLDAU_CHAOS_MODEL_STEPS sets the number of operations (400 in `make test`,
4000 in `make chaos`); MOLDAU_CHAOS_SEED replays a run.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import pytest

from helpers.reliability import budget, record_result, seeded_random
from helpers.txn_wire import (
    CONCURRENT_TRANSACTIONS,
    INVALID_RECORD,
    INVALID_TXN_STATE,
    NONE,
    READ_COMMITTED,
    READ_UNCOMMITTED,
    UNSTABLE_OFFSET_COMMIT,
    create_topic,
    end_txn,
    init_producer_id,
    lso,
    produce,
    wait_for,
)
from helpers.wire import WireClient
from protocol.records import CONTROL_COMMIT, build_batch, iter_records, read_control_marker, scan_batches

STEPS = budget(400, 4000, "MOLDAU_CHAOS_MODEL_STEPS")
CHECK_EVERY = budget(60, 250)  # steps between full checks (and one at the end)
TOPIC = "model"
GROUP = "model-group"
PARTITIONS = 3
SEGMENT_BYTES = 400  # a few batches per segment: rolls, snapshots and transaction indexes everywhere
TXN_TIMEOUT_MS = 3_600_000  # no coordinator timeout during the run: every abort is one the test makes
INVALID_PRODUCER_EPOCH = 47
PRODUCER_FENCED = 90
NO_TXN = -1


@dataclass
class Batch:
    first: int
    last: int
    producer_id: int
    transactional: bool
    control: bool
    values: list[bytes]
    txn: int = NO_TXN  # the transaction instance of a transactional data batch


@dataclass
class Partition:
    batches: list[Batch] = field(default_factory=list)
    open: dict[int, tuple[int, int]] = field(default_factory=dict)  # producer id -> (first offset, txn instance)
    aborted: list[tuple[int, int, int]] = field(default_factory=list)  # (producer id, first offset, marker offset)

    @property
    def end(self) -> int:
        return self.batches[-1].last + 1 if self.batches else 0

    @property
    def lso(self) -> int:
        return min((first for first, _ in self.open.values()), default=self.end)


class Model:
    def __init__(self) -> None:
        self.partitions = [Partition() for _ in range(PARTITIONS)]
        self.committed: set[int] = set()  # transaction instances that committed
        self._instances = 0
        # the group's offsets: partition -> (offset, order of the commit's record in __consumer_offsets)
        self.offsets: dict[int, tuple[int, int]] = {}
        self.pending_offsets: dict[int, dict[int, tuple[int, int]]] = {}  # producer id -> staged offsets
        self.commits = 0

    def new_instance(self) -> int:
        self._instances += 1
        return self._instances

    def append(self, partition: int, producer_id: int, values: list[bytes], transactional: bool,
               instance: int = NO_TXN) -> int:
        p = self.partitions[partition]
        first = p.end
        p.batches.append(Batch(first, first + len(values) - 1, producer_id, transactional, False, values, instance))
        if transactional and producer_id not in p.open:
            p.open[producer_id] = (first, instance)
        return first

    def marker(self, partition: int, producer_id: int, committed: bool) -> None:
        p = self.partitions[partition]
        offset = p.end
        p.batches.append(Batch(offset, offset, producer_id, True, True, []))
        opened = p.open.pop(producer_id, None)
        if opened is None:
            return
        first, instance = opened
        if committed:
            self.committed.add(instance)
        else:
            p.aborted.append((producer_id, first, offset))

    def commit_offsets(self, offsets: dict[int, int], producer_id: int | None = None) -> None:
        """An offset commit (staged for ``producer_id``'s transaction if given)."""
        self.commits += 1
        target = self.offsets if producer_id is None else self.pending_offsets.setdefault(producer_id, {})
        target.update((p, (offset, self.commits)) for p, offset in offsets.items())

    def end_offsets(self, producer_id: int, committed: bool) -> None:
        """The transaction's marker in __consumer_offsets: a staged offset counts unless a later commit has."""
        for p, staged in self.pending_offsets.pop(producer_id, {}).items():
            if committed and staged[1] > self.offsets.get(p, (-1, 0))[1]:
                self.offsets[p] = staged

    def offset_fetch(self, require_stable: bool, partitions: list[int] | None) -> dict[int, tuple[int, int]]:
        """(error, offset) per partition as OffsetFetch answers; ``partitions`` None: all of the group's."""
        pending = {p for staged in self.pending_offsets.values() for p in staged} if require_stable else set()
        if partitions is None:
            partitions = sorted(self.offsets.keys() | pending)
        return {p: (UNSTABLE_OFFSET_COMMIT, -1) if p in pending else (NONE, self.offsets.get(p, (-1, 0))[0])
                for p in partitions}

    def visible(self, partition: int, start: int, end: int) -> list[bytes]:
        """What a read_committed consumer gets of offsets [start, end)."""
        return [value for b in self.partitions[partition].batches if not b.control
                and (not b.transactional or b.txn in self.committed)
                for offset, value in enumerate(b.values, b.first) if start <= offset < end]


@dataclass
class TxnProducer:
    transactional_id: str
    v2: bool  # transaction version 2: Produce v12 and TxnOffsetCommit v5 add partitions, EndTxn v5 bumps the epoch
    producer_id: int = -1
    epoch: int = -1
    partitions: set[int] = field(default_factory=set)
    offsets_added: bool = False  # the group's offsets partition is in the open transaction
    instance: int = NO_TXN
    seq: dict[int, int] = field(default_factory=dict)
    fenced_epoch: int | None = None  # an epoch of this id's that a new incarnation fenced: a zombie's

    @property
    def ident(self) -> tuple[str, int, int]:
        return self.transactional_id, self.producer_id, self.epoch

    @property
    def in_transaction(self) -> bool:
        return bool(self.partitions) or self.offsets_added


@dataclass
class IdempotentProducer:
    producer_id: int
    epoch: int = 0
    seq: dict[int, int] = field(default_factory=dict)
    last: tuple[int, bytes, int] | None = None  # (partition, batch, offset) of the last write, for retries


class Run:
    def __init__(self, broker, rng) -> None:
        self.broker = broker
        self.rng = rng
        self.model = Model()
        self.client = WireClient(broker.port)
        self.txns = [TxnProducer(f"model-txn-{i}", v2=i == 0) for i in range(3)]
        self.idempotent: list[IdempotentProducer] = []
        self.counter = 0
        self.stats = {"restarts": 0, "commits": 0, "aborts": 0, "fenced": 0, "checks": 0, "fetches": 0}

    def value(self, kind: str) -> bytes:
        self.counter += 1
        return f"{kind}-{self.counter}".encode()

    # --- transactional producers --------------------------------------------------------------

    def init(self, t: TxnProducer) -> None:
        """InitProducerId: fences the previous incarnation; an open transaction of it is aborted first."""
        deadline = time.monotonic() + 30
        while True:
            code, pid, epoch = init_producer_id(self.client, t.transactional_id, timeout_ms=TXN_TIMEOUT_MS)
            if code != CONCURRENT_TRANSACTIONS:
                break
            assert time.monotonic() < deadline, f"{t.transactional_id} stays in CONCURRENT_TRANSACTIONS"
            time.sleep(0.02)
        assert code == NONE, f"InitProducerId {t.transactional_id}: {code}"
        if t.in_transaction:  # the coordinator aborted the open transaction: its markers are in
            self.learn_markers(t.producer_id, t.partitions, committed=False)
            self.model.end_offsets(t.producer_id, committed=False)
            self.stats["fenced"] += 1
        if t.producer_id >= 0:
            t.fenced_epoch = t.epoch
        t.producer_id, t.epoch, t.partitions, t.instance, t.seq = pid, epoch, set(), NO_TXN, {}
        t.offsets_added = False

    def add_partitions(self, t: TxnProducer) -> None:
        wanted = set(self.rng.sample(range(PARTITIONS), self.rng.randint(1, PARTITIONS)))
        r = self.client.request("AddPartitionsToTxn", 3, {
            "v3_and_below_transactional_id": t.transactional_id, "v3_and_below_producer_id": t.producer_id,
            "v3_and_below_producer_epoch": t.epoch,
            "v3_and_below_topics": [{"name": TOPIC, "partitions": sorted(wanted)}]})
        codes = {p["partition_error_code"] for topic in r["results_by_topic_v3_and_below"]
                 for p in topic["results_by_partition"]}
        assert codes == {NONE}, f"AddPartitionsToTxn {t}: {codes}"
        if t.instance == NO_TXN:
            t.instance = self.model.new_instance()
        t.partitions |= wanted

    def txn_offsets(self, t: TxnProducer) -> None:
        """send_offsets_to_transaction: AddOffsetsToTxn once, then TxnOffsetCommit of random offsets."""
        if not t.offsets_added and not t.v2:  # version 2's TxnOffsetCommit v5 adds the partition itself
            assert self.client.request("AddOffsetsToTxn", 3, {
                "transactional_id": t.transactional_id, "producer_id": t.producer_id, "producer_epoch": t.epoch,
                "group_id": GROUP})["error_code"] == NONE
        t.offsets_added = True
        if t.instance == NO_TXN:
            t.instance = self.model.new_instance()
        offsets = {p: self.rng.randrange(1000) for p in self.rng.sample(range(PARTITIONS), self.rng.randint(1, 2))}
        r = self.client.request("TxnOffsetCommit", 5 if t.v2 else 3, {
            "transactional_id": t.transactional_id, "group_id": GROUP, "producer_id": t.producer_id,
            "producer_epoch": t.epoch, "generation_id": -1, "member_id": "", "group_instance_id": None,
            "topics": [{"name": TOPIC, "partitions": [
                {"partition_index": p, "committed_offset": o, "committed_leader_epoch": -1, "committed_metadata": ""}
                for p, o in offsets.items()]}]})
        assert {p["error_code"] for p in r["topics"][0]["partitions"]} == {NONE}, r
        self.model.commit_offsets(offsets, t.producer_id)

    def plain_offsets(self) -> None:
        """A plain OffsetCommit of the same group (a consumer outside any transaction)."""
        offsets = {p: self.rng.randrange(1000) for p in self.rng.sample(range(PARTITIONS), self.rng.randint(1, 2))}
        r = self.client.request("OffsetCommit", 8, {
            "group_id": GROUP, "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
            "topics": [{"name": TOPIC, "partitions": [
                {"partition_index": p, "committed_offset": o, "committed_leader_epoch": -1, "committed_metadata": ""}
                for p, o in offsets.items()]}]})
        assert {p["error_code"] for p in r["topics"][0]["partitions"]} == {NONE}, r
        self.model.commit_offsets(offsets)

    def txn_write(self, t: TxnProducer) -> None:
        """A transactional write; version 2's Produce v12 may go to any partition, which it adds."""
        partition = self.rng.randrange(PARTITIONS) if t.v2 else self.rng.choice(sorted(t.partitions))
        values = [self.value(t.transactional_id) for _ in range(self.rng.randint(1, 3))]
        seq = t.seq.get(partition, 0)
        batch = build_batch([(None, v) for v in values], producer_id=t.producer_id, producer_epoch=t.epoch,
                            base_sequence=seq, transactional=True)
        assert produce(self.client, TOPIC, batch, t.transactional_id, partition, 12 if t.v2 else 9) == NONE
        if t.instance == NO_TXN:
            t.instance = self.model.new_instance()
        t.partitions.add(partition)
        t.seq[partition] = seq + len(values)
        self.model.append(partition, t.producer_id, values, True, t.instance)

    def end(self, t: TxnProducer, committed: bool, kill: bool) -> None:
        if t.v2:
            r = self.client.request("EndTxn", 5, {"transactional_id": t.transactional_id, "producer_id": t.producer_id,
                                                  "producer_epoch": t.epoch, "committed": committed})
            assert (r["error_code"], r["producer_id"], r["producer_epoch"]) == (NONE, t.producer_id, t.epoch + 1)
        else:
            assert end_txn(self.client, t.ident, committed) == NONE
        if kill:  # before the markers are (all) out: the restarted coordinator sends them again
            self.restart()
        state = "CompleteCommit" if committed else "CompleteAbort"
        wait_for(lambda: self.describe(t.transactional_id) == state, f"{t.transactional_id} reaching {state}")
        self.learn_markers(t.producer_id, t.partitions, committed)
        self.model.end_offsets(t.producer_id, committed)
        self.stats["commits" if committed else "aborts"] += 1
        t.partitions, t.offsets_added, t.instance = set(), False, NO_TXN
        if t.v2:  # the markers carried the bumped epoch, whose sequences start at 0
            t.epoch, t.seq = t.epoch + 1, {}

    def zombie(self, t: TxnProducer) -> None:
        """The fenced incarnation writes and ends its transaction: both refused, nothing stored."""
        partition = self.rng.randrange(PARTITIONS)
        batch = build_batch([(None, b"zombie")], producer_id=t.producer_id, producer_epoch=t.fenced_epoch,
                            base_sequence=0, transactional=True)
        assert produce(self.client, TOPIC, batch, t.transactional_id, partition) == INVALID_PRODUCER_EPOCH
        stale = (t.transactional_id, t.producer_id, t.fenced_epoch)
        assert end_txn(self.client, stale, self.rng.random() < 0.5) == PRODUCER_FENCED

    def describe(self, transactional_id: str) -> str:
        r = self.client.request("DescribeTransactions", 0, {"transactional_ids": [transactional_id]})
        return r["transaction_states"][0]["transaction_state"]

    def learn_markers(self, producer_id: int, partitions: set[int], committed: bool) -> None:
        """Take the markers the coordinator wrote: one or more (a resend after a restart) per partition of
        the transaction, nothing else, and nothing in the other partitions."""
        for partition in range(PARTITIONS):
            p = self.model.partitions[partition]
            found = self.read_batches(partition, p.end, READ_UNCOMMITTED)
            if partition not in partitions:
                assert not found, f"partition {partition}: unexpected batches past {p.end}: {found}"
                continue
            assert found, f"partition {partition}: no marker of producer {producer_id}"
            for hdr, data, pos in found:
                assert hdr.is_control and hdr.producer_id == producer_id and hdr.base_offset == p.end, hdr
                assert (read_control_marker(data, pos).type == CONTROL_COMMIT) == committed, hdr
                self.model.marker(partition, producer_id, committed)

    # --- idempotent and plain producers -----------------------------------------------------------

    def idempotent_write(self) -> None:
        if not self.idempotent or self.rng.random() < 0.05:
            code, pid, epoch = init_producer_id(self.client, None)
            assert (code, epoch) == (NONE, 0)
            self.idempotent.append(IdempotentProducer(pid))
        producer = self.rng.choice(self.idempotent)
        roll = self.rng.random()
        if producer.last is not None and roll < 0.15:  # a retry: answered with the original offset
            partition, batch, offset = producer.last
            r = self.produce_offset(batch, None, partition)
            assert r == (NONE, offset), f"retry of producer {producer.producer_id}: {r}, stored at {offset}"
            return
        if roll < 0.22:  # KIP-360 epoch bump
            code, pid, epoch = init_producer_id(self.client, None, producer.producer_id, producer.epoch)
            assert (code, pid, epoch) == (NONE, producer.producer_id, producer.epoch + 1)
            producer.epoch, producer.seq, producer.last = epoch, {}, None
            return
        partition = self.rng.randrange(PARTITIONS)
        if roll < 0.27 and producer.epoch > 0 and partition in producer.seq:  # where the new epoch wrote
            stale = build_batch([(None, b"stale")], producer_id=producer.producer_id,
                                producer_epoch=producer.epoch - 1, base_sequence=0)
            assert self.produce_offset(stale, None, partition)[0] == INVALID_PRODUCER_EPOCH
            return
        values = [self.value("idem") for _ in range(self.rng.randint(1, 3))]
        seq = producer.seq.get(partition, 0)
        batch = build_batch([(None, v) for v in values], producer_id=producer.producer_id,
                            producer_epoch=producer.epoch, base_sequence=seq)
        code, offset = self.produce_offset(batch, None, partition)
        assert code == NONE, f"idempotent write: {code}"
        assert offset == self.model.append(partition, producer.producer_id, values, False)
        producer.seq[partition] = seq + len(values)
        producer.last = (partition, batch, offset)

    def plain_write(self) -> None:
        partition = self.rng.randrange(PARTITIONS)
        values = [self.value("plain") for _ in range(self.rng.randint(1, 4))]
        code, offset = self.produce_offset(build_batch([(None, v) for v in values]), None, partition)
        assert code == NONE and offset == self.model.append(partition, -1, values, False)

    def hostile_write(self) -> None:
        """Issue 15: two batches in one partition's records; a plain batch under an open transaction's id."""
        partition = self.rng.randrange(PARTITIONS)
        two = build_batch([(None, b"one")]) + build_batch([(None, b"two")])
        assert produce(self.client, TOPIC, two, None, partition) == INVALID_RECORD
        open_in = {(t.transactional_id, partition): t for t in self.txns for partition in t.partitions
                   if t.producer_id in self.model.partitions[partition].open}
        if open_in:
            (_, partition), t = self.rng.choice(sorted(open_in.items()))
            bump = self.rng.randint(0, 2)  # in sequence for its epoch: only the missing transactional flag is wrong
            intruder = build_batch([(None, b"intruder")], producer_id=t.producer_id, producer_epoch=t.epoch + bump,
                                   base_sequence=0 if bump else t.seq[partition])
            assert produce(self.client, TOPIC, intruder, None, partition) == INVALID_TXN_STATE

    def produce_offset(self, batch: bytes, transactional_id: str | None, partition: int) -> tuple[int, int]:
        r = self.client.request("Produce", 9, {"transactional_id": transactional_id, "acks": -1, "timeout_ms": 10000,
                                               "topic_data": [{"name": TOPIC, "partition_data": [
                                                   {"index": partition, "records": batch}]}]})
        part = r["responses"][0]["partition_responses"][0]
        return part["error_code"], part["base_offset"]

    # --- the broker ----------------------------------------------------------------------------

    def restart(self) -> None:
        self.client.close()
        self.broker.kill()
        self.broker.start()
        self.client = WireClient(self.broker.port)
        self.stats["restarts"] += 1

    def fetch(self, partition: int, offset: int, max_bytes: int, isolation: int) -> dict:
        self.stats["fetches"] += 1
        r = self.client.request("Fetch", 12, {
            "max_wait_ms": 0, "min_bytes": 0, "max_bytes": max_bytes, "isolation_level": isolation,
            "topics": [{"topic": TOPIC, "partitions": [
                {"partition": partition, "fetch_offset": offset, "partition_max_bytes": max_bytes}]}]})
        part = r["responses"][0]["partitions"][0]
        assert part["error_code"] == NONE, f"fetch {partition}@{offset}: {part['error_code']}"
        return part

    def read_batches(self, partition: int, offset: int, isolation: int) -> list:
        """(header, records, position) of every batch from ``offset`` on."""
        found = []
        while True:
            records = self.fetch(partition, offset, 1 << 20, isolation)["records"] or b""
            batches = [(hdr, records, pos) for pos, hdr in scan_batches(records)]
            if not batches:
                return found
            found += batches
            offset = batches[-1][0].last_offset + 1

    def check(self) -> None:
        """Every partition against the model, from every start offset; the group's offsets in every form."""
        self.stats["checks"] += 1
        for require_stable in (False, True):
            for version in (7, 8):
                for partitions in (None, list(range(PARTITIONS))):
                    got = self.offset_fetch(version, require_stable, partitions)
                    assert got == self.model.offset_fetch(require_stable, partitions), \
                        f"OffsetFetch v{version} require_stable={require_stable} partitions={partitions}"
        for partition, p in enumerate(self.model.partitions):
            stored = [(h.base_offset, h.last_offset, h.producer_id, h.is_control)
                      for h, _, _ in self.read_batches(partition, 0, READ_UNCOMMITTED)]
            assert stored == [(b.first, b.last, b.producer_id, b.control) for b in p.batches], \
                f"partition {partition}: the log is not the model's"
            assert lso(self.client, TOPIC, partition) == p.lso
            for start in range(0, p.end + 1):
                self.check_fetch(partition, p, start, self.rng.choice((80, 200, 500, 1 << 20)))
            offset, got = 0, []
            while offset < p.lso:
                part = self.fetch(partition, offset, 300, READ_COMMITTED)
                values, end = consumer_view(part, offset)
                assert end > offset, f"partition {partition}: no progress at {offset} below the LSO {p.lso}"
                got += values
                offset = end
            assert got == self.model.visible(partition, 0, p.lso), f"partition {partition}: read from the start"

    def offset_fetch(self, version: int, require_stable: bool, partitions: list[int] | None
                     ) -> dict[int, tuple[int, int]]:
        topics = None if partitions is None else [{"name": TOPIC, "partition_indexes": partitions}]
        if version >= 8:
            r = self.client.request("OffsetFetch", version, {"groups": [{"group_id": GROUP, "topics": topics}],
                                                             "require_stable": require_stable})
            (group,) = r["groups"]
            assert group["error_code"] == NONE
            found = group["topics"]
        else:
            r = self.client.request("OffsetFetch", version, {"group_id": GROUP, "topics": topics,
                                                             "require_stable": require_stable})
            assert r["error_code"] == NONE
            found = r["topics"]
        return {p["partition_index"]: (p["error_code"], p["committed_offset"])
                for t in found if t["name"] == TOPIC for p in t["partitions"]}

    def check_fetch(self, partition: int, p: Partition, start: int, max_bytes: int) -> None:
        part = self.fetch(partition, start, max_bytes, READ_COMMITTED)
        where = f"partition {partition}, read_committed fetch at {start} ({max_bytes} bytes)"
        assert (part["high_watermark"], part["last_stable_offset"]) == (p.end, p.lso), where
        values, end = consumer_view(part, start)
        if start < p.lso:
            assert end > start, f"{where}: nothing below the LSO {p.lso}"
        assert end <= max(p.lso, start), f"{where}: a batch at or past the LSO {p.lso} (up to {end})"
        returned = {(a["producer_id"], a["first_offset"]) for a in part["aborted_transactions"]}
        expected = {(pid, first) for pid, first, marker in p.aborted if marker >= start and first < end > start}
        assert returned == expected, f"{where}: aborted transactions {returned}, the model has {expected}"
        assert values == self.model.visible(partition, start, end), f"{where}: records up to {end}"

    # --- the run -------------------------------------------------------------------------------

    def step(self) -> None:
        roll = self.rng.random()
        t = self.rng.choice(self.txns)
        if t.producer_id < 0 or roll < 0.04:
            self.init(t)
        elif roll < 0.10 and t.fenced_epoch is not None:
            self.zombie(t)
        elif roll < 0.40:
            if not t.v2 and (not t.partitions or self.rng.random() < 0.2):
                self.add_partitions(t)
            else:
                self.txn_write(t)
        elif roll < 0.45:
            self.txn_offsets(t) if self.rng.random() < 0.8 else self.plain_offsets()
        elif roll < 0.54 and t.in_transaction:
            self.end(t, committed=self.rng.random() < 0.6, kill=self.rng.random() < 0.1)
        elif roll < 0.73:
            self.idempotent_write()
        elif roll < 0.85:
            self.plain_write()
        elif roll < 0.90:
            self.hostile_write()
        elif roll < 0.92:
            self.restart()


def consumer_view(part: dict, start: int) -> tuple[list[bytes], int]:
    """(records a Kafka consumer keeps of a read_committed fetch at ``start``, the offset after the last
    batch): aborted producers' transactional batches dropped from their first offset to their abort marker."""
    records = part["records"] or b""
    aborted = sorted((a["first_offset"], a["producer_id"]) for a in part["aborted_transactions"])
    aborting: set[int] = set()
    values, end = [], start
    for pos, hdr in scan_batches(records):
        while aborted and aborted[0][0] <= hdr.last_offset:
            aborting.add(aborted.pop(0)[1])
        end = hdr.last_offset + 1
        if hdr.is_control:
            if read_control_marker(records, pos).type != CONTROL_COMMIT:
                aborting.discard(hdr.producer_id)
            continue
        if hdr.is_transactional and hdr.producer_id in aborting:
            continue
        values += [r.value for r in iter_records(records, pos) if r.offset >= start]
    return values, end


@pytest.mark.timeout(budget(300, 3600))
def test_read_committed_agrees_with_the_model(start_broker):
    rng, seed = seeded_random(f"transaction model: {STEPS} steps")
    b = start_broker({"transaction.max.timeout.ms": TXN_TIMEOUT_MS, "log.index.interval.bytes": 100})
    started = time.monotonic()
    with WireClient(b.port) as c:
        create_topic(c, TOPIC, partitions=PARTITIONS, segment_bytes=str(SEGMENT_BYTES))
    run = Run(b, rng)
    try:
        for step in range(STEPS):
            run.step()
            if step % CHECK_EVERY == CHECK_EVERY - 1:
                run.check()
        for t in run.txns:  # end what is open, so the last check reads to the end
            if t.in_transaction:
                run.end(t, committed=rng.random() < 0.5, kill=False)
        run.check()
    finally:
        run.client.close()
    ends = [p.end for p in run.model.partitions]
    assert sum(ends) > STEPS, f"too little was written: {ends}"
    assert run.stats["commits"] and run.stats["aborts"] and run.stats["fenced"], run.stats
    record_result("transaction_model", steps=STEPS, seed=seed, log_ends=ends,
                  seconds=round(time.monotonic() - started, 1), **run.stats)
