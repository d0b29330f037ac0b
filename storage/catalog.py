"""The topic catalog: names, ids, partition counts and configs, kept in topics.json."""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from storage.errors import InconsistentMetadata, InvalidTopic
from storage.files import atomic_write, decode_uuid, encode_uuid

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


def load_catalog(path: Path) -> dict[str, TopicMetadata]:
    if not path.exists():
        return {}
    try:
        document = json.loads(path.read_text())
        if document["version"] != CATALOG_VERSION:
            raise ValueError(f"unknown version {document['version']}")
        topics = [
            TopicMetadata(
                entry["name"], decode_uuid(entry["topic_id"]), int(entry["num_partitions"]), dict(entry["configs"])
            )
            for entry in document["topics"]
        ]
    except (KeyError, TypeError, ValueError) as exc:
        raise InconsistentMetadata(f"unreadable {path.name}: {exc}") from None
    return {topic.name: topic for topic in topics}


def save_catalog(path: Path, topics: dict[str, TopicMetadata]) -> None:
    document = {
        "version": CATALOG_VERSION,
        "topics": [
            {
                "name": topic.name,
                "topic_id": encode_uuid(topic.topic_id),
                "num_partitions": topic.num_partitions,
                "configs": topic.configs,
            }
            for topic in sorted(topics.values(), key=lambda t: t.name)
        ],
    }
    atomic_write(path, (json.dumps(document, indent=2) + "\n").encode())
