"""IncrementalAlterConfigs' operations on a config's value (KIP-339), for topic and broker configs alike."""

from __future__ import annotations


def config_list(value: str | None) -> list[str]:
    """A LIST config's items."""
    return [item.strip() for item in (value or "").split(",") if item.strip()]


# IncrementalAlterConfigs operations
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


def list_changed(items: list[str], operation: int, value: str | None) -> str:
    """A LIST config's value after APPEND or SUBTRACT of ``value``'s items."""
    given = config_list(value)
    if operation == APPEND:
        return ",".join(items + [item for item in given if item not in items])
    return ",".join(item for item in items if item not in given)
