"""The topic catalog: names, ids, partition counts and configs.

Kept in topics.json (a snapshot, rewritten at startup) and topics.json.journal (one JSON line per
change since, appended with one fsync), so creating a topic costs the same however many there are.
"""

from __future__ import annotations

import json
import os
import re
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from storage.errors import InconsistentMetadata, InvalidTopic
from storage.files import atomic_write, decode_uuid, encode_uuid, fsync_dir

MAX_TOPIC_NAME_LENGTH = 249
_LEGAL_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]+")
CATALOG_VERSION = 1


@dataclass(frozen=True)
class TopicMetadata:
    name: str
    topic_id: uuid.UUID
    num_partitions: int
    configs: dict[str, str] = field(default_factory=dict)


def validate_topic_name(name: str) -> None:
    """Kafka's rules: 1-249 characters of [a-zA-Z0-9._-], and not "." or ".."."""
    if not name:
        raise InvalidTopic("topic name is empty")
    if name in (".", ".."):
        raise InvalidTopic(f"topic name cannot be {name!r}")
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        raise InvalidTopic(f"topic name is longer than {MAX_TOPIC_NAME_LENGTH} characters")
    if not _LEGAL_TOPIC_NAME.fullmatch(name):
        raise InvalidTopic(f"topic name {name!r} has characters other than ASCII alphanumerics, '.', '_' and '-'")


def collision_key(name: str) -> str:
    """Names that differ only in '.' versus '_' clash in Kafka's metric names."""
    return name.replace(".", "_")


def _decode(entry: dict) -> TopicMetadata:
    return TopicMetadata(
        entry["name"], decode_uuid(entry["topic_id"]), int(entry["num_partitions"]), dict(entry["configs"])
    )


def _encode(topic: TopicMetadata) -> dict:
    return {
        "name": topic.name,
        "topic_id": encode_uuid(topic.topic_id),
        "num_partitions": topic.num_partitions,
        "configs": topic.configs,
    }


def load_catalog(path: Path) -> dict[str, TopicMetadata]:
    """The snapshot in ``path`` with its journal (``journal_path(path)``) replayed on top."""
    topics: dict[str, TopicMetadata] = {}
    if path.exists():
        try:
            document = json.loads(path.read_text())
            if document["version"] != CATALOG_VERSION:
                raise ValueError(f"unknown version {document['version']}")
            topics = {topic.name: topic for topic in map(_decode, document["topics"])}
        except (KeyError, TypeError, ValueError) as exc:
            raise InconsistentMetadata(f"unreadable {path.name}: {exc}") from None
    journal = journal_path(path)
    if journal.exists():
        lines = journal.read_bytes().split(b"\n")
        for number, line in enumerate(lines[:-1], 1):  # the last piece is "" or a torn, never fsynced write
            try:
                change = json.loads(line)
                if "put" in change:
                    topic = _decode(change["put"])
                    topics[topic.name] = topic
                else:
                    topics.pop(change["delete"], None)
            except (KeyError, TypeError, ValueError) as exc:
                raise InconsistentMetadata(f"unreadable {journal.name} line {number}: {exc}") from None
    return topics


def save_catalog(path: Path, topics: dict[str, TopicMetadata]) -> None:
    """Write the whole catalog as a new snapshot and drop the journal it includes."""
    document = {"version": CATALOG_VERSION, "topics": [_encode(t) for t in sorted(topics.values(), key=lambda t: t.name)]}
    atomic_write(path, (json.dumps(document, indent=2) + "\n").encode())
    journal = journal_path(path)
    if journal.exists():
        journal.unlink()  # replaying it again onto the new snapshot would change nothing, should this not persist
        fsync_dir(path.parent)


def journal_path(path: Path) -> Path:
    return path.with_name(path.name + ".journal")


def append_catalog(path: Path, put: list[TopicMetadata] = (), delete: list[str] = ()) -> None:
    """Record topic changes with one appended write and one fsync, instead of rewriting the catalog."""
    lines = [json.dumps({"put": _encode(t)}) for t in put] + [json.dumps({"delete": name}) for name in delete]
    journal = journal_path(path)
    created = not journal.exists()
    fd = os.open(journal, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    size = os.fstat(fd).st_size
    try:
        data = memoryview(("\n".join(lines) + "\n").encode())
        while data:
            data = data[os.write(fd, data) :]
        os.fsync(fd)
    except OSError:
        os.ftruncate(fd, size)  # no half line for the next change to follow
        raise
    finally:
        os.close(fd)
    if created:
        fsync_dir(path.parent)
