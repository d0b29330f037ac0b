"""Odd but well-formed requests for the robustness tests, built from the message schemas.

tests/protocol/schema_samples.py fills every field of a request: random
strings, extreme numbers, nulls, empty arrays. It is loaded by path, since
``protocol`` on sys.path is the project's own package.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from helpers.wire import WireClient

SCHEMA_SAMPLES = Path(__file__).resolve().parents[1] / "protocol" / "schema_samples.py"


def _schema_samples():
    spec = importlib.util.spec_from_file_location("schema_samples", SCHEMA_SAMPLES)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def send_odd_requests(port: int, apis: list[str]) -> None:
    """Every sample variant of every advertised version of each API; fails unless each is answered."""
    samples = _schema_samples()
    with WireClient(port, timeout=5) as c:
        for api in apis:
            lo, hi = samples.ADVERTISED[api]
            for version in range(lo, hi + 1):
                for variant in samples.VARIANTS:
                    c.request(api, version, samples.sample(api + "Request", version, variant))
