"""Producer ids: each one handed out once, never again, also across restarts.

Ids are reserved in blocks of 1000, as Kafka's controller does: the start of
the next block is written to ``producer-id-block`` in the log directory
(atomically, fsynced) before any id of the current block is handed out. A
restart continues with the next block, so ids a crashed run may have handed
out are never reused; the rest of its block is simply skipped.

In a cluster the blocks come from the metadata store instead (one counter in
etcd for all brokers, as Kafka's /latest_producer_id_block in ZooKeeper):
``block_source`` reserves the next block ahead of need and hands it over
with ``adopt_block``.
"""

from __future__ import annotations

import logging
from pathlib import Path

from storage.errors import InconsistentMetadata
from storage.files import read_key_values, write_key_values

BLOCK_SIZE = 1000
PRODUCER_ID_FILE = "producer-id-block"
_NEXT_BLOCK = "next.block.start"

log = logging.getLogger("moldau.producer_ids")


class ProducerIdManager:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._next = self._block_end = self._read_next_block()
        self.block_source = None  # a cluster's metadata store: request_block() reserves one, adopt_block() gets it
        self._pending: int | None = None
        self._highest_end = self._block_end

    def adopt_block(self, start: int) -> None:
        """A block reserved cluster-wide: used once the current one runs out."""
        self._pending = start
        self._highest_end = max(self._highest_end, start + BLOCK_SIZE)

    def _read_next_block(self) -> int:
        if not self.path.exists():
            return 0
        try:
            start = int(read_key_values(self.path, "=")[_NEXT_BLOCK])
        except (KeyError, ValueError):
            raise InconsistentMetadata(f"unreadable {self.path}") from None
        if start < 0:
            raise InconsistentMetadata(f"{self.path}: negative {_NEXT_BLOCK} {start}")
        return start

    def generate(self) -> int | None:
        """A producer id no producer had before; None (logged) when the next block could not be
        reserved, e.g. on a full disk, which callers answer with a retriable error."""
        if self._next == self._block_end and self.block_source is not None:
            if self._pending is None:
                self.block_source.request_block()
                return None
            self._next, self._block_end, self._pending = self._pending, self._pending + BLOCK_SIZE, None
            self.block_source.request_block()  # the next one, ahead of need
        elif self._next == self._block_end:
            end = self._block_end + BLOCK_SIZE
            try:
                write_key_values(self.path, {"version": "0", _NEXT_BLOCK: str(end)}, "=")
            except OSError as exc:
                log.error("could not reserve producer ids: %s", exc)
                return None
            self._block_end = end
        producer_id = self._next
        self._next += 1
        return producer_id

    def issued(self, producer_id: int) -> bool:
        """Whether ``producer_id`` may have been handed out (by this run or an earlier one)."""
        return 0 <= producer_id < (self._highest_end if self.block_source is not None else self._next)
