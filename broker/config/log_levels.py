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


# --- the BROKER_LOGGER config resource: this broker's log levels at run time, as Kafka's Log4jController
# (not stored: a restart goes back to log.level, as in Kafka) ----------------------------------------------

ROOT = "root"  # Kafka's name of the root logger
_KAFKA_NAMES = {logging.DEBUG: "DEBUG", logging.INFO: "INFO", logging.WARNING: "WARN", logging.ERROR: "ERROR",
                logging.CRITICAL: "FATAL", logging.CRITICAL + 1: "OFF"}


def _level_name(level: int) -> str:
    return _KAFKA_NAMES.get(level, logging.getLevelName(level))


def loggers() -> dict[str, str]:
    """Every logger there is, with the level in force for it (its own or inherited), root first."""
    found = {ROOT: _level_name(logging.getLogger().level)}
    for name in sorted(logging.root.manager.loggerDict):
        logger = logging.root.manager.loggerDict[name]
        if isinstance(logger, logging.Logger):
            found[name] = _level_name(logger.getEffectiveLevel())
    return found


def logger_problem(name: str, level: str | None) -> str | None:
    """Why Kafka would refuse setting (or, with None, unsetting: never the root's) ``name``'s level as an
    invalid config, else None."""
    if name != ROOT and not isinstance(logging.root.manager.loggerDict.get(name), logging.Logger):
        return f"Logger {name} does not exist!"
    if level is not None and level.strip().upper() not in _LEVELS:
        return (f"Cannot set the log level of {name} to {level} as it is not a supported log level. "
                f"Valid log levels are {', '.join(_KAFKA_NAMES.values())}")
    return None


def set_logger_level(name: str, level: str | None) -> None:
    """``level`` for ``name``; None: it inherits its parent's again."""
    logger = logging.getLogger() if name == ROOT else logging.getLogger(name)
    logger.setLevel(logging.NOTSET if level is None else _LEVELS[level.strip().upper()])
