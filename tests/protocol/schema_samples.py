"""Shared by the protocol tests: what the broker advertises, and sample messages
built from the message schemas themselves.

The advertised table has one source of truth, the handler registry
(``broker.handlers.HANDLERS``). While the broker package is mid-construction
and does not import, the table is read statically from the same ``API = Api(name,
(min, max), ...)`` declarations the registry is built from (see ``declared_handlers``),
so the protocol tests keep running; ``test_roundtrip`` checks that both views
agree once the import works, and fails if the import breaks for any reason
other than a project module that does not exist yet.
"""

from __future__ import annotations

import ast
import random
import uuid
from pathlib import Path

import pytest

from protocol import codec, records
from protocol.codec import VersionRange, snake

HANDLERS_DIR = Path(__file__).resolve().parents[2] / "broker" / "handlers"


def declared_handlers() -> dict[str, tuple[int, int]]:
    """API name -> (min, max) from the handler modules' ``API = Api(...)``, without importing them."""
    table = {}
    for path in sorted(HANDLERS_DIR.glob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["API"]:
                name, versions = (ast.literal_eval(arg) for arg in node.value.args[:2])
                table[name] = tuple(versions)
    return table


def _registry() -> tuple[dict[str, tuple[int, int]], ImportError | None]:
    try:
        from broker.handlers import HANDLERS
    except ImportError as exc:
        return declared_handlers(), exc
    return {h.name: (h.min_version, h.max_version) for h in HANDLERS.values()}, None


ADVERTISED, HANDLERS_IMPORT_ERROR = _registry()


def advertised_versions(kinds=("Request", "Response")) -> list[tuple[str, int]]:
    """(message name, version) for every advertised API version, requests and/or responses."""
    return [
        (api + kind, version)
        for api, (lo, hi) in sorted(ADVERTISED.items())
        for version in range(lo, hi + 1)
        for kind in kinds
    ]


def params(cases) -> list:
    """pytest parameters with readable ids: ``FetchRequest-v13-populated``."""
    return [
        pytest.param(*case, id="-".join(f"v{part}" if isinstance(part, int) else str(part) for part in case))
        for case in cases
    ]


# --- walking a schema at one version ----------------------------------------


def present(field: dict, version: int) -> bool:
    return version in VersionRange(field.get("versions"))


def nullable(field: dict, version: int) -> bool:
    return version in VersionRange(field.get("nullableVersions"))


def tagged(field: dict, version: int) -> bool:
    return "tag" in field and version in VersionRange(field.get("taggedVersions"))


def is_struct(field: dict) -> bool:
    return "fields" in field


def message_fields(name: str) -> list:
    """The message's fields, with a field typed by one of its common structs given that struct's fields."""
    common = {s["name"]: s["fields"] for s in codec.definition(name).get("commonStructs", [])}

    def inline(fields: list) -> list:
        out = []
        for f in fields:
            base = f["type"].removeprefix("[]")
            if is_struct(f) or base in common:
                f = dict(f, fields=inline(f["fields"] if is_struct(f) else common[base]))
            out.append(f)
        return out

    return inline(codec.definition(name)["fields"])


def int_default(field: dict) -> int:
    raw = field.get("default")
    if field["type"] == "bool":
        return str(raw).lower() == "true"
    return int(str(raw), 0) if raw not in (None, "") else 0


# --- sample messages ---------------------------------------------------------

POPULATED, NULLS, EMPTY = "populated", "nulls", "empty"
VARIANTS = (POPULATED, NULLS, EMPTY)

_INT_BITS = {"int8": 8, "int16": 16, "int32": 32, "int64": 64}
SAMPLE_TIMESTAMP = 1_700_000_000_123


def sample_records(variant: str = POPULATED) -> bytes:
    """A real record batch (two records, a header, a null key) for records fields."""
    if variant == EMPTY:
        return b""
    return records.build_batch(
        [(b"key-1", b"value-1"), (None, b"value-2", [("h", b"\x00\x01")])],
        base_offset=0,
        timestamp_ms=SAMPLE_TIMESTAMP,
        producer_id=4242,
        producer_epoch=3,
        base_sequence=17,
    )


class SampleBuilder:
    """Fills every field present at ``version`` with a value chosen for ``variant``.

    populated: distinctive non-default values everywhere (tagged fields too, so
        they are written), two elements per array, non-ASCII strings;
    nulls: every nullable field null, one element per non-nullable array;
    empty: zeros, empty strings/bytes/records, empty arrays.
    Values come from a generator seeded by (message, version, variant), so a
    failure reproduces exactly.
    """

    def __init__(self, name: str, version: int, variant: str = POPULATED):
        self.name = name
        self.version = version
        self.variant = variant
        self.rng = random.Random(f"{name}/{version}/{variant}")
        self.counter = 0

    def message(self) -> dict:
        return self.struct(message_fields(self.name))

    def struct(self, fields: list) -> dict:
        return {snake(f["name"]): self.value(f) for f in fields if present(f, self.version)}

    def value(self, field: dict):
        if self.variant == NULLS and nullable(field, self.version):
            return None
        ftype = field["type"]
        if ftype.startswith("[]"):
            count = {POPULATED: 2, NULLS: 1, EMPTY: 0}[self.variant]
            if is_struct(field):
                return [self.struct(field["fields"]) for _ in range(count)]
            return [self.scalar(dict(field, type=ftype[2:], default=None)) for _ in range(count)]
        if is_struct(field):
            return self.struct(field["fields"])
        return self.scalar(field)

    def scalar(self, field: dict):
        ftype = field["type"]
        self.counter += 1
        empty = self.variant == EMPTY
        if ftype == "bool":
            return False if empty else not int_default(field)
        if ftype in _INT_BITS or ftype == "uint16":
            if empty:
                return 0
            if ftype == "uint16":
                lo, hi = 0, 0xFFFF
            else:
                bits = _INT_BITS[ftype]
                lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
            value = self.rng.randint(lo, hi)
            return value if value != int_default(field) else value ^ 1
        if ftype == "float64":
            return 0.0 if empty else self.rng.uniform(-1e9, 1e9)
        if ftype == "string":
            return "" if empty else f"{snake(field['name'])}-{self.counter}-ü€"
        if ftype == "bytes":
            return b"" if empty else self.rng.randbytes(3 + self.counter % 5)
        if ftype == "uuid":
            return uuid.UUID(int=self.rng.getrandbits(128))
        if ftype == "records":
            return sample_records(self.variant)
        raise AssertionError(f"{self.name}: no sample for type {ftype!r}")


def sample(name: str, version: int, variant: str = POPULATED) -> dict:
    return SampleBuilder(name, version, variant).message()


# --- comparing decoded messages ----------------------------------------------


def differences(name: str, version: int, expected: dict, actual: dict) -> list[str]:
    """Field-by-field differences between a sample and a decoded message."""
    return _struct_differences(message_fields(name), version, expected, actual, "")


def _struct_differences(fields: list, version: int, expected: dict, actual: dict, path: str) -> list[str]:
    out = []
    for field in fields:
        key = snake(field["name"])
        where = f"{path}.{key}" if path else key
        if not present(field, version):
            continue
        if key not in actual:
            out.append(f"{where}: missing from the decoded message")
        else:
            out += _value_differences(field, version, expected[key], actual[key], where)
    return out


def _value_differences(field: dict, version: int, expected, actual, where: str) -> list[str]:
    if expected is None or actual is None:
        return [] if expected is actual else [f"{where}: expected {expected!r}, decoded {actual!r}"]
    ftype = field["type"]
    if ftype.startswith("[]"):
        if not isinstance(actual, list) or len(actual) != len(expected):
            return [f"{where}: expected {len(expected)} elements, decoded {actual!r}"]
        elem = dict(field, type=ftype[2:])
        return [d for i, (e, a) in enumerate(zip(expected, actual, strict=False)) for d in _value_differences(elem, version, e, a, f"{where}[{i}]")]
    if is_struct(field):
        return _struct_differences(field["fields"], version, expected, actual, where)
    if ftype == "records":
        ok = isinstance(actual, (bytes, memoryview)) and bytes(actual) == expected
    else:
        ok = type(actual) is type(expected) and actual == expected
    return [] if ok else [f"{where}: expected {expected!r}, decoded {actual!r}"]
