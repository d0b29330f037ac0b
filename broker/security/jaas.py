"""Kafka's sasl.jaas.config values: `<LoginModule class> required key="value" ...;`."""

from __future__ import annotations

import re

from ..config.broker_config import ConfigError

PLAIN_LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_LOGIN_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"

_ENTRY = re.compile(r'\s*([\w.$]+)\s+(required|requisite|sufficient|optional)((?:\s+[^\s=;]+\s*=\s*(?:"(?:[^"\\]|\\.)*"|[^\s;"]+))*)\s*;\s*')
_OPTION = re.compile(r'([^\s=;]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s;"]+))')


def parse(text: str) -> tuple[str, dict[str, str]]:
    """The login module's class name and its options; ConfigError if it is not one JAAS entry."""
    match = _ENTRY.fullmatch(text)
    if match is None:
        raise ConfigError("sasl.jaas.config: expected '<LoginModule> required key=\"value\" ...;'")
    options = {}
    for key, quoted, bare in _OPTION.findall(match.group(3)):
        options[key] = re.sub(r"\\(.)", r"\1", quoted) if quoted or not bare else bare
    return match.group(1), options


def plain_users(text: str) -> dict[str, str]:
    """PlainLoginModule's user_<name>="<password>" options: the users a PLAIN listener accepts."""
    module, options = parse(text)
    if module != PLAIN_LOGIN_MODULE:
        raise ConfigError(f"sasl.jaas.config for PLAIN must use {PLAIN_LOGIN_MODULE}, not {module}")
    return {key[len("user_"):]: value for key, value in options.items() if key.startswith("user_")}
