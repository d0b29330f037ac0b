"""Test-only fault injection, off unless its environment variable is set when the broker starts.

MOLDAU_FAULT_DROP_RESPONSE_EVERY=N (N >= 2): every Nth Produce request is
handled as usual -- its batches are appended -- but instead of answering, the
broker closes the connection: a lost acknowledgement. Producers retry, and
idempotent ones must not create duplicates.
"""

from __future__ import annotations

import os

from .config import ConfigError

DROP_RESPONSE_ENV = "MOLDAU_FAULT_DROP_RESPONSE_EVERY"


class ResponseDropper:
    """Decides, for each response about to be sent, whether to close the connection instead."""

    def __init__(self, every: int) -> None:
        self.every = every
        self.produce_responses = 0

    def __call__(self, api_name: str) -> bool:
        if not self.every or api_name != "Produce":
            return False
        self.produce_responses += 1
        return self.produce_responses % self.every == 0


def response_dropper() -> ResponseDropper:
    """The dropper the environment asks for; one that never drops by default."""
    text = os.environ.get(DROP_RESPONSE_ENV, "0")
    try:
        every = int(text)
    except ValueError:
        every = -1
    if every < 0 or every == 1:  # 1 would drop every answer, so no produce could ever succeed
        raise ConfigError(f"{DROP_RESPONSE_ENV} must be 0 (off) or at least 2, got {text!r}")
    return ResponseDropper(every)
