"""ApiVersions: the versions of every API this broker serves."""

from broker.errors import ErrorCode

API = "ApiVersions"
VERSIONS = (0, 4)


def _api_keys() -> list[dict]:
    from . import HANDLERS  # the registry imports this module first

    return [
        {"api_key": key, "min_version": h.min_version, "max_version": h.max_version}
        for key, h in sorted(HANDLERS.items())
    ]


def handle(broker, request, header) -> dict:
    return {"error_code": 0, "api_keys": _api_keys(), "throttle_time_ms": 0}


def unsupported_version() -> dict:
    return {"error_code": ErrorCode.UNSUPPORTED_VERSION, "api_keys": _api_keys()}
