"""A partition's leader-epoch checkpoint: the first offset each leader epoch wrote (KIP-101).

Kept in ``leader-epoch-checkpoint`` in Kafka's text format (version, count,
then one ``epoch start_offset`` line per entry). It answers
OffsetForLeaderEpoch and tells a follower where its log diverges from the
leader's after a leader change.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from storage.files import atomic_write

LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
UNDEFINED_EPOCH = -1
UNDEFINED_OFFSET = -1


class EpochEntry(NamedTuple):
    epoch: int
    start_offset: int


class LeaderEpochCache:
    def __init__(self, directory: Path) -> None:
        self.path = directory / LEADER_EPOCH_CHECKPOINT
        self.entries: list[EpochEntry] = []
        self.loaded = self._read()

    def _read(self) -> bool:
        """Read the file; False if it is missing or unreadable (the log then rebuilds it from its batches)."""
        try:
            lines = self.path.read_text().split("\n")
            count = int(lines[1])
            self.entries = [EpochEntry(*map(int, line.split())) for line in lines[2 : 2 + count]]
            return lines[0].strip() == "0" and len(self.entries) == count
        except (OSError, ValueError, IndexError, TypeError):
            self.entries = []
            return False

    def _write(self, sync: bool = True) -> None:
        body = "".join(f"{e.epoch} {e.start_offset}\n" for e in self.entries)
        atomic_write(self.path, f"0\n{len(self.entries)}\n{body}".encode(), sync=sync)

    @property
    def latest_epoch(self) -> int:
        return self.entries[-1].epoch if self.entries else UNDEFINED_EPOCH

    def assign(self, epoch: int, start_offset: int, persist: bool = True, sync: bool = True) -> bool:
        """Record that ``epoch`` begins at ``start_offset``; older or equal epochs are ignored (False).
        Without ``sync`` the file is written but not fsynced: the caller makes it durable (sync_filesystem)
        before anything of that epoch is acknowledged."""
        if epoch < 0 or epoch <= self.latest_epoch:
            return False
        # an epoch that begins where an earlier one did replaces it: that one wrote nothing
        while self.entries and self.entries[-1].start_offset >= start_offset:
            self.entries.pop()
        self.entries.append(EpochEntry(epoch, start_offset))
        if persist:
            self._write(sync)
        return True

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(largest epoch <= ``epoch``, the offset where the next epoch begins or the log end), as
        OffsetForLeaderEpoch answers; (-1, -1) for an undefined epoch or an empty cache. An epoch older than
        every entry (its records deleted, or it wrote nothing here) ends where the first known epoch begins,
        as in Kafka: a consumer there is told where to go on, not that its position is unknown (which
        would make librdkafka reset it, by auto.offset.reset, to the log start)."""
        if epoch == self.latest_epoch:
            return epoch, log_end_offset
        found = UNDEFINED_EPOCH, UNDEFINED_OFFSET
        for i, entry in enumerate(self.entries):
            if entry.epoch > epoch:
                if i > 0:
                    found = self.entries[i - 1].epoch, entry.start_offset
                elif epoch >= 0:
                    found = epoch, entry.start_offset
                break
        else:
            if self.entries:
                found = self.entries[-1].epoch, log_end_offset
        return found

    def truncate_from_end(self, end_offset: int) -> bool:
        """Forget epochs that begin at or after ``end_offset`` (the log was truncated there); True if any went."""
        kept = [e for e in self.entries if e.start_offset < end_offset]
        if kept == self.entries:
            return False
        self.entries = kept
        self._write()
        return True

    def clear(self) -> None:
        self.entries = []
        self.path.unlink(missing_ok=True)
