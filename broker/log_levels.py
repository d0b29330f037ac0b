"""log4j-style log levels: `INFO` for every logger, `INFO,moldau.server=DEBUG` for one logger more.

Set with `--log-level` or `--override log.level=...` (the command line wins); Kafka's level names
(TRACE, WARN, FATAL, OFF) are understood too.
"""

from __future__ import annotations

import logging

_LEVELS = {
    "TRACE": logging.DEBUG, "DEBUG": logging.DEBUG, "INFO": logging.INFO, "WARN": logging.WARNING,
    "WARNING": logging.WARNING, "ERROR": logging.ERROR, "FATAL": logging.CRITICAL, "CRITICAL": logging.CRITICAL,
    "OFF": logging.CRITICAL + 1,
}


def parse_log_levels(text: str) -> dict[str, int]:
    """'LEVEL,logger=LEVEL,...' -> {logger name ('' for the root): level}; ValueError names what is wrong."""
    levels = {}
    for item in text.split(","):
        if not item.strip():
            continue
        name, _, level = item.rpartition("=")
        level = level.strip().upper()
        if level not in _LEVELS:
            raise ValueError(f"{level or item.strip()!r} is not a level ({', '.join(_LEVELS)})")
        levels[name.strip()] = _LEVELS[level]
    return levels


def log_levels_problem(text: str) -> str | None:
    """What is wrong with a log.level value, or None (a config check)."""
    try:
        parse_log_levels(text)
    except ValueError as exc:
        return str(exc)
    return None


def apply_log_levels(text: str) -> None:
    for name, level in parse_log_levels(text).items():
        logging.getLogger(name or None).setLevel(level)
