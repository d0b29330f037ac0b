"""Group configs (Kafka's GroupConfig, resource type GROUP in DescribeConfigs and IncrementalAlterConfigs):
a group's own value wins over the broker's default. Share groups read the ``share.*`` ones, KIP-848 consumer
groups the ``consumer.*`` ones.

They are kept by the metadata store, as the dynamic broker configs are: in a cluster the etcd key
``/configs/groups/<group>``, written with compare-and-swap before the answer and applied by every broker from
its watch; a standalone broker keeps them in ``<log dir>/group-configs.json``.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from typing import Callable

from storage.errors import InvalidConfig
from storage.files import atomic_write

from ..errors import ErrorCode

GROUP_RESOURCE = 32
FILE = "group-configs.json"
SET, DELETE = 0, 1

log = logging.getLogger("moldau.group_configs")


_DURATION = re.compile(r"P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?")


def parse_duration_ms(text: str) -> int:
    """An ISO-8601 duration (PnDTnHnMnS, as Java's Duration.parse takes it) in milliseconds."""
    match = _DURATION.fullmatch(text.strip().upper())
    if match is None or text.strip().upper() in ("P", "PT"):
        raise ValueError(f"not an ISO-8601 duration: {text}")
    days, hours, minutes, seconds = (float(g) if g else 0.0 for g in match.groups())
    return int((((days * 24 + hours) * 60 + minutes) * 60 + seconds) * 1000)


def _offset_reset(value: str, config) -> str | None:
    if value in ("latest", "earliest"):
        return None
    if value.startswith("by_duration:"):
        try:
            parse_duration_ms(value.removeprefix("by_duration:"))
            return None
        except ValueError:
            pass
    return "must be latest, earliest or by_duration:<ISO-8601 duration>"


def _bounded(group_type: str, kind: str) -> "GroupConfig":
    """``<type>.<kind>.ms``: the broker's ``group.<type>.<kind>.ms`` by default, and within the broker's
    ``group.<type>.min/max.<kind>.ms``, as Kafka's GroupConfig.validateValues checks a group's value."""
    low, high = f"group.{group_type}.min.{kind}.ms", f"group.{group_type}.max.{kind}.ms"

    def check(value: int, config) -> str | None:
        if value < config[low]:
            return f"must be greater than or equal to {low} ({config[low]})"
        if value > config[high]:
            return f"must be less than or equal to {high} ({config[high]})"
        return None
    return GroupConfig(int, lambda c: c[f"group.{group_type}.{kind}.ms"], check, 2)


def _isolation(value: str, config) -> str | None:
    return None if value in ("read_committed", "read_uncommitted") else "must be read_committed or read_uncommitted"


def _lock_duration(value: int, config) -> str | None:
    return None if 1000 <= value <= 3_600_000 else "must be in [1000, 3600000]"


@dataclass(frozen=True)
class GroupConfig:
    parse: Callable[[str], object]
    default: Callable[[object], object]  # of the broker config
    check: Callable[[object, object], str | None]  # (value, broker config)
    config_type: int  # DescribeConfigs' type: 2 INT, 5 STRING


CONFIGS = {
    **{f"{group_type}.{kind}.ms": _bounded(group_type, kind)
       for group_type in ("consumer", "share") for kind in ("heartbeat.interval", "session.timeout")},
    "share.auto.offset.reset": GroupConfig(str, lambda c: "latest", _offset_reset, 5),
    "share.isolation.level": GroupConfig(str, lambda c: "read_uncommitted", _isolation, 5),
    "share.record.lock.duration.ms": GroupConfig(
        int, lambda c: c["group.share.record.lock.duration.ms"], _lock_duration, 2),
}


class GroupConfigs:
    def __init__(self, config) -> None:
        self.config = config
        self.path = config.log_dir / FILE
        self.groups: dict[str, dict[str, str]] = {}

    def value(self, group_id: str, name: str):
        text = self.groups.get(group_id, {}).get(name)
        spec = CONFIGS[name]
        return spec.default(self.config) if text is None else spec.parse(text)

    def changed(self, current: dict[str, str], ops: list[dict]) -> dict[str, str]:
        """A group's configs after IncrementalAlterConfigs' SET / DELETE operations; InvalidConfig naming
        what Kafka refuses."""
        wanted = dict(current)
        for op in ops:
            name, value, operation = op["name"], op["value"], op["config_operation"]
            if name not in CONFIGS:
                raise InvalidConfig(f"Unknown group config name: {name}")
            if operation == DELETE:
                wanted.pop(name, None)
            elif operation != SET or value is None:
                raise InvalidConfig(f"{name} can only be set or deleted")
            else:
                wanted[name] = value
        self._check(wanted)
        return wanted

    def _check(self, configs: dict[str, str]) -> None:
        values = {}
        for name, spec in CONFIGS.items():
            text = configs.get(name)
            if text is None:
                values[name] = spec.default(self.config)
                continue
            try:
                values[name] = spec.parse(text)
            except ValueError:
                raise InvalidConfig(f"{name}={text}: not a number") from None
            problem = spec.check(values[name], self.config)
            if problem:
                raise InvalidConfig(f"{name}={text}: {problem}")
        for group_type in ("consumer", "share"):
            if values[f"{group_type}.session.timeout.ms"] <= values[f"{group_type}.heartbeat.interval.ms"]:
                raise InvalidConfig(f"{group_type}.session.timeout.ms must be greater than "
                                    f"{group_type}.heartbeat.interval.ms")

    def set(self, group_id: str, configs: dict[str, str]) -> None:
        """A group's configs as the store has them now; ValueError if they are not names and values."""
        if not isinstance(configs, dict) or not all(isinstance(v, str) for v in (*configs, *configs.values())):
            raise ValueError(f"configs of group {group_id} are not an object of strings")
        configs = {name: text for name, text in configs.items() if self._readable(group_id, name, text)}
        if configs == self.groups.get(group_id, {}):
            return
        if configs:
            self.groups[group_id] = dict(configs)
        else:
            self.groups.pop(group_id, None)
        log.info("group %s configs are now %s", group_id, configs or "default")

    @staticmethod
    def _readable(group_id: str, name: str, text: str) -> bool:
        """Whether a stored config is one this broker can use (one stored by another version may not be)."""
        try:
            CONFIGS[name].parse(text)
            return True
        except (KeyError, ValueError):
            log.error("group %s: config %s=%s not applied: not one this broker knows", group_id, name, text)
            return False

    def describe(self, group_id: str) -> list[tuple]:
        """DescribeConfigs entries: (name, value, source 8 = the group's own (GROUP_CONFIG), 5 = default, type)."""
        own = self.groups.get(group_id, {})
        return [(name, str(self.value(group_id, name)), 8 if name in own else 5, spec.config_type)
                for name, spec in sorted(CONFIGS.items())]

    # --- standalone storage ---------------------------------------------------------------------

    def load(self) -> None:
        """What an earlier run of a standalone broker stored."""
        try:
            stored = json.loads(self.path.read_text()) if self.path.exists() else {}
            if not isinstance(stored, dict):
                raise ValueError("not an object")
            for group_id, configs in stored.items():
                self.set(group_id, configs)
        except (OSError, ValueError) as exc:
            log.error("%s unreadable (%s): groups use the broker defaults", self.path, exc)

    def save(self) -> None:
        atomic_write(self.path, json.dumps(self.groups, indent=1, sort_keys=True).encode())


async def alter(broker, group_id: str, ops: list[dict], validate_only: bool) -> tuple[ErrorCode, str | None]:
    """IncrementalAlterConfigs of one GROUP resource, stored before the answer."""
    if not group_id:
        return ErrorCode.INVALID_REQUEST, "a group resource names a group (there is no default group)"
    configs = broker.group_configs
    try:
        await broker.store.alter_group_configs(group_id, lambda current: configs.changed(current, ops),
                                               validate_only)
    except InvalidConfig as exc:
        return ErrorCode.INVALID_CONFIG, str(exc)
    except TimeoutError as exc:  # other writers kept winning: retriable
        return ErrorCode.REQUEST_TIMED_OUT, str(exc)
    except OSError as exc:
        log.error("configs of group %s not stored: %s", group_id, exc)
        return ErrorCode.KAFKA_STORAGE_ERROR, f"group configs not written: {exc}"
    return ErrorCode.NONE, None


async def forget(broker, group_id: str) -> None:
    """A deleted group's configs go with it (Kafka deletes them with the group)."""
    if group_id not in broker.group_configs.groups:
        return
    try:
        await broker.store.alter_group_configs(group_id, lambda current: {}, False)
    except (OSError, TimeoutError) as exc:
        log.error("configs of deleted group %s not removed: %s", group_id, exc)
