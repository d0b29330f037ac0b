"""The message browser: the records of one partition, read with Fetch, and how each key, value and header is
shown (JSON pretty-printed, text, or hex for binary)."""

from __future__ import annotations

import json
from dataclasses import dataclass

from protocol.errors import CorruptRecord
from protocol.records import CONTROL_ABORT, iter_records, read_control_marker, scan_batches

from ..admin.client import EARLIEST, LATEST
from .client import ConsoleClient

MAX_RECORDS = 100  # what one page may ask for: with SHOWN_BYTES, what bounds the browser's page weight
SHOWN_BYTES = 2048  # of a key, value or header; the rest is cut, saying how much


@dataclass
class Shown:
    kind: str  # "null", "json", "text", "hex"
    text: str
    size: int

    @property
    def cut(self) -> int:
        return max(self.size - SHOWN_BYTES, 0)


@dataclass
class Row:
    offset: int
    timestamp: int
    key: Shown
    value: Shown
    headers: list[tuple[str, Shown]]


def show(data: bytes | None) -> Shown:
    if data is None:
        return Shown("null", "null", 0)
    data = bytes(data)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return Shown("hex", data[:SHOWN_BYTES].hex(" "), len(data))
    if text[:1] in "{[" and text:
        try:
            return Shown("json", json.dumps(json.loads(text), indent=2, ensure_ascii=False)[:SHOWN_BYTES * 2],
                         len(data))
        except ValueError:
            pass
    if any(ord(c) < 32 and c not in "\t\n\r" for c in text):
        return Shown("hex", data[:SHOWN_BYTES].hex(" "), len(data))
    return Shown("text", text[:SHOWN_BYTES], len(data))


def decode(records: bytes | None, read_committed: bool, aborted: list[dict]) -> tuple[list, int | None]:
    """The records of a Fetch answer, control batches left out and (read_committed) those of aborted
    transactions, which the answer lists by producer and first offset, as a Kafka consumer drops them; and
    the offset after its last whole batch (None: no whole batch)."""
    buf = bytes(records or b"")
    starts = sorted((a["first_offset"], a["producer_id"]) for a in aborted or ()) if read_committed else []
    aborting: set[int] = set()
    found = []
    next_offset = None
    try:
        for pos, hdr in scan_batches(buf):
            next_offset = hdr.next_offset
            while starts and starts[0][0] <= hdr.last_offset:
                aborting.add(starts.pop(0)[1])
            if hdr.is_control:
                if read_control_marker(buf, pos).type == CONTROL_ABORT:
                    aborting.discard(hdr.producer_id)
                continue
            if hdr.is_transactional and hdr.producer_id in aborting:
                continue
            found += iter_records(buf, pos)
    except CorruptRecord:  # what came before is still worth showing
        pass
    return found, next_offset


async def browse(client: ConsoleClient, topic: str, partition: int, *, count: int, offset: int | None = None,
                 timestamp_ms: int | None = None, read_committed: bool = False) -> tuple[int, int, list[Row]]:
    """Up to ``count`` records: the latest (no offset or timestamp), or from an offset, or from the first at or
    after a timestamp. Returns (log start, end: high watermark or last stable offset, rows)."""
    count = max(1, min(count, MAX_RECORDS))
    tp = (topic, partition)
    start = (await client.list_offsets([tp], EARLIEST))[tp]
    end = (await client.list_offsets([tp], LATEST, read_committed))[tp]
    if timestamp_ms is not None:
        found = (await client.list_offsets([tp], timestamp_ms))[tp]
        offset = end if found < 0 else found
    elif offset is None:
        offset = max(start, end - count)
    offset = max(offset, start)
    rows: list[Row] = []
    while len(rows) < count and offset < end:
        answer = await client.fetch(topic, partition, offset, read_committed)
        batch, next_offset = decode(answer["records"], read_committed, answer["aborted_transactions"])
        if next_offset is None or next_offset <= offset:
            break  # nothing more to read here (or a batch larger than the fetch may carry)
        rows += [Row(r.offset, r.timestamp, show(r.key), show(r.value), [(k, show(v)) for k, v in r.headers])
                 for r in batch if offset <= r.offset < end]
        offset = next_offset
    return start, end, rows[:count]
