"""Kafka's offset checkpoint file format (recovery-point-offset-checkpoint).

0                     <- format version
2                     <- number of entries
orders 0 1200         <- topic partition offset
orders 1 30
"""

from __future__ import annotations

from pathlib import Path

from storage.files import atomic_write

VERSION = 0


class MalformedCheckpoint(ValueError):
    pass


def read_offset_checkpoint(path: Path) -> dict[tuple[str, int], int]:
    """The entries of ``path``; empty if it does not exist. Raises MalformedCheckpoint."""
    if not path.exists():
        return {}
    lines = path.read_text().splitlines()
    try:
        if int(lines[0]) != VERSION:
            raise MalformedCheckpoint(f"unknown checkpoint version {lines[0]}")
        count = int(lines[1])
        entries = {}
        for line in lines[2:]:
            topic, partition, offset = line.split()
            entries[(topic, int(partition))] = int(offset)
    except (IndexError, ValueError) as exc:
        raise MalformedCheckpoint(f"{path.name}: {exc}") from None
    if len(entries) != count:
        raise MalformedCheckpoint(f"{path.name}: expected {count} entries, found {len(entries)}")
    return entries


def write_offset_checkpoint(path: Path, entries: dict[tuple[str, int], int]) -> None:
    lines = [str(VERSION), str(len(entries))]
    lines += [f"{topic} {partition} {offset}" for (topic, partition), offset in sorted(entries.items())]
    atomic_write(path, ("\n".join(lines) + "\n").encode())
