"""Group configs of share groups (Kafka's GroupConfig, resource type GROUP in DescribeConfigs and
IncrementalAlterConfigs): a group's own value wins over the broker's default.

Kept in ``group-configs.json`` in the log dir, replaced whole (write, fsync, rename) on
every change, so a restart or a kill -9 keeps what an IncrementalAlterConfigs answered.
"""

from __future__ import annotations

import json
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from broker.errors import ErrorCode

GROUP_RESOURCE = 32
FILE = "group-configs.json"
SET, DELETE = 0, 1

log = logging.getLogger("moldau.share")


_DURATION = re.compile(r"P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?")


def parse_duration_ms(text: str) -> int:
    """An ISO-8601 duration (PnDTnHnMnS, as Java's Duration.parse takes it) in milliseconds."""
    match = _DURATION.fullmatch(text.strip().upper())
    if match is None or text.strip().upper() in ("P", "PT"):
        raise ValueError(f"not an ISO-8601 duration: {text}")
    days, hours, minutes, seconds = (float(g) if g else 0.0 for g in match.groups())
    return int((((days * 24 + hours) * 60 + minutes) * 60 + seconds) * 1000)


def _offset_reset(value: str) -> str | None:
    if value in ("latest", "earliest"):
        return None
    if value.startswith("by_duration:"):
        try:
            parse_duration_ms(value.removeprefix("by_duration:"))
            return None
        except ValueError:
            pass
    return "must be latest, earliest or by_duration:<ISO-8601 duration>"


@dataclass(frozen=True)
class GroupConfig:
    parse: Callable[[str], object]
    default: Callable[[object], object]  # of the broker config
    check: Callable[[object], str | None]
    config_type: int  # DescribeConfigs' type: 2 INT, 5 STRING


CONFIGS = {
    "share.auto.offset.reset": GroupConfig(str, lambda c: "latest", _offset_reset, 5),
    "share.isolation.level": GroupConfig(
        str, lambda c: "read_uncommitted",
        lambda v: None if v in ("read_committed", "read_uncommitted") else "must be read_committed or read_uncommitted",
        5),
    "share.record.lock.duration.ms": GroupConfig(
        int, lambda c: c["group.share.record.lock.duration.ms"],
        lambda v: None if 1000 <= v <= 3_600_000 else "must be in [1000, 3600000]", 2),
}


class GroupConfigs:
    def __init__(self, config) -> None:
        self.config = config
        self.path = Path(config.log_dir) / FILE
        self.groups: dict[str, dict[str, str]] = {}
        try:
            self.groups = json.loads(self.path.read_text())
        except FileNotFoundError:
            pass
        except (OSError, ValueError) as exc:
            log.error("%s unreadable (%s): share groups use the broker defaults", self.path, exc)

    def value(self, group_id: str, name: str):
        text = self.groups.get(group_id, {}).get(name)
        spec = CONFIGS[name]
        return spec.default(self.config) if text is None else spec.parse(text)

    def alter(self, group_id: str, ops: list[dict], validate_only: bool) -> tuple[ErrorCode, str | None]:
        """IncrementalAlterConfigs of one GROUP resource: SET or DELETE of share.* configs."""
        wanted = dict(self.groups.get(group_id, {}))
        for op in ops:
            name, value, operation = op["name"], op["value"], op["config_operation"]
            spec = CONFIGS.get(name)
            if spec is None:
                return ErrorCode.INVALID_CONFIG, f"unknown group config {name}"
            if operation == DELETE:
                wanted.pop(name, None)
                continue
            if operation != SET or value is None:
                return ErrorCode.INVALID_CONFIG, f"{name} can only be set or deleted"
            try:
                problem = spec.check(spec.parse(value))
            except ValueError:
                problem = "not a number"
            if problem:
                return ErrorCode.INVALID_CONFIG, f"{name}={value}: {problem}"
            wanted[name] = value
        if validate_only:
            return ErrorCode.NONE, None
        before = self.groups.get(group_id)
        if wanted:
            self.groups[group_id] = wanted
        else:
            self.groups.pop(group_id, None)
        try:
            self._write()
        except OSError as exc:
            self.groups[group_id] = before or {}
            return ErrorCode.KAFKA_STORAGE_ERROR, f"group configs not written: {exc}"
        log.info("group %s configs are now %s", group_id, wanted or "default")
        return ErrorCode.NONE, None

    def forget(self, group_id: str) -> None:
        """A deleted group's configs go with it (Kafka deletes them with the group)."""
        if self.groups.pop(group_id, None) is not None:
            try:
                self._write()
            except OSError as exc:
                log.error("group configs of deleted group %s not removed: %s", group_id, exc)

    def describe(self, group_id: str) -> list[dict]:
        """DescribeConfigs entries: (name, value, source 8 = the group's own (GROUP_CONFIG), 5 = default, type)."""
        own = self.groups.get(group_id, {})
        return [(name, str(self.value(group_id, name)), 8 if name in own else 5, spec.config_type)
                for name, spec in sorted(CONFIGS.items())]

    def _write(self) -> None:
        tmp = self.path.with_name(self.path.name + ".tmp")
        with open(tmp, "w") as f:
            json.dump(self.groups, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
