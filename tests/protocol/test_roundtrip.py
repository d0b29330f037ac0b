"""Every advertised API version, request and response: schema-generated
messages survive encode -> decode unchanged, and re-encode byte for byte."""

from __future__ import annotations

import pytest

from protocol import codec
from protocol.codec import snake
from schema_samples import (
    ADVERTISED,
    HANDLERS_IMPORT_ERROR,
    NULLS,
    VARIANTS,
    advertised_versions,
    declared_handlers,
    differences,
    params,
    sample,
)

PROJECT_PACKAGES = ("broker", "storage", "protocol")
CASES = [(name, version, variant) for name, version in advertised_versions() for variant in VARIANTS]


def test_advertised_table_is_the_handler_registry():
    exc = HANDLERS_IMPORT_ERROR
    if exc is not None:
        missing = getattr(exc, "name", None) or ""
        if isinstance(exc, ModuleNotFoundError) and missing.split(".")[0] in PROJECT_PACKAGES:
            pytest.skip(f"broker.handlers does not import yet ({exc}); using the handler modules' declarations")
        raise AssertionError("broker.handlers no longer imports") from exc
    assert ADVERTISED == declared_handlers()


def test_every_advertised_version_has_request_and_response_schemas():
    assert ADVERTISED, "no advertised APIs found"
    for api, (lo, hi) in ADVERTISED.items():
        for kind in ("Request", "Response"):
            valid = codec.valid_versions(api + kind)
            assert lo in valid and hi in valid, f"{api}{kind} schema has versions {valid.lo}-{valid.hi}, advertised {lo}-{hi}"


@pytest.mark.parametrize("name,version,variant", params(CASES))
def test_encode_decode_roundtrip(name, version, variant):
    message = sample(name, version, variant)
    data = codec.encode_bytes(name, version, message)

    decoded, end = codec.decode(name, version, data)
    assert end == len(data), f"decoder stopped at {end} of {len(data)} bytes"
    assert differences(name, version, message, decoded) == []
    assert codec.encode_bytes(name, version, decoded) == data


@pytest.mark.parametrize("name,version", params(advertised_versions()))
def test_decode_from_an_offset_in_a_larger_buffer(name, version):
    """Frames arrive as memoryviews with the header before the body."""
    data = codec.encode_bytes(name, version, sample(name, version))
    buf = memoryview(b"\xee" * 7 + data)

    decoded, end = codec.decode(name, version, buf, 7)
    assert end == len(buf)
    assert codec.encode_bytes(name, version, decoded) == data


def all_keys(fields: list) -> set[str]:
    return {snake(f["name"]) for f in fields}


@pytest.mark.parametrize("name,version", params(advertised_versions()))
def test_decoded_message_carries_fields_of_other_versions(name, version):
    """Handlers need no version checks: absent fields decode to their defaults."""
    decoded, _ = codec.decode(name, version, codec.encode_bytes(name, version, sample(name, version)))
    assert set(decoded) == all_keys(codec.definition(name)["fields"])


def test_cases_cover_nullable_fields():
    """The nulls variant really produces nulls somewhere (guards the generator)."""
    assert any(None in sample(name, version, NULLS).values() for name, version in advertised_versions())
