"""Raw Kafka wire frames for tests that must talk below any client library."""

from __future__ import annotations

import socket
import ssl
import struct
import time

from protocol.frames import decode_response, encode_request

API_VERSIONS = 18


def request_header_v1(api_key: int, api_version: int, correlation_id: int, client_id: str | None = "moldau-test") -> bytes:
    if client_id is None:
        cid = struct.pack(">h", -1)
    else:
        raw = client_id.encode()
        cid = struct.pack(">h", len(raw)) + raw
    return struct.pack(">hhi", api_key, api_version, correlation_id) + cid


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def api_versions_v0(correlation_id: int) -> bytes:
    """A complete ApiVersions v0 request (empty body), framed."""
    return frame(request_header_v1(API_VERSIONS, 0, correlation_id))


def connect(port: int, timeout: float = 5.0) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.settimeout(timeout)
    return s


def recv_exact(s: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionError(f"connection closed after {len(buf)} of {n} bytes")
        buf += chunk
    return bytes(buf)


def recv_frame(s: socket.socket) -> bytes:
    (size,) = struct.unpack(">i", recv_exact(s, 4))
    assert 0 <= size < 64 << 20, f"implausible response size {size}"
    return recv_exact(s, size)


def parse_api_versions_v0(resp: bytes) -> tuple[int, int, dict[int, tuple[int, int]]]:
    """(correlation_id, error_code, {api_key: (min, max)}) of an ApiVersions v0 response."""
    corr, err, n = struct.unpack_from(">ihi", resp, 0)
    pos = 10
    apis = {}
    for _ in range(n):
        k, lo, hi = struct.unpack_from(">hhh", resp, pos)
        pos += 6
        apis[k] = (lo, hi)
    return corr, err, apis


def api_versions_roundtrip(s: socket.socket, correlation_id: int) -> dict[int, tuple[int, int]]:
    s.sendall(api_versions_v0(correlation_id))
    corr, err, apis = parse_api_versions_v0(recv_frame(s))
    assert corr == correlation_id, f"ApiVersions correlation id {corr} != {correlation_id}"
    assert err == 0, f"ApiVersions v0 error code {err}"
    return apis


def wait_closed(s: socket.socket, timeout: float = 5.0) -> tuple[bool, bytes]:
    """Read until the peer closes; (closed within timeout?, bytes received meanwhile).

    A reset counts as closed. Received bytes (an error response before the
    close, say) are returned for diagnostics.
    """
    deadline = time.monotonic() + timeout
    got = bytearray()
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return False, bytes(got)
        s.settimeout(left)
        try:
            chunk = s.recv(65536)
        except socket.timeout:
            return False, bytes(got)
        except (ConnectionResetError, BrokenPipeError):
            return True, bytes(got)
        if not chunk:
            return True, bytes(got)
        got += chunk


def send_ignoring_reset(s: socket.socket, data: bytes) -> None:
    """sendall, tolerating the broker closing the socket while we are still sending."""
    try:
        s.sendall(data)
    except (ConnectionResetError, BrokenPipeError):
        pass


class WireClient:
    """A blocking client that speaks any API through the broker's own codec (protocol/frames).

    For checks a client library cannot express: a batch sent twice on purpose,
    a skipped sequence, a stale epoch.
    """

    def __init__(self, port: int, timeout: float = 10.0, tls: ssl.SSLContext | None = None):
        self.sock = connect(port, timeout)
        if tls is not None:  # a TLS listener: the same client inside a TLS session
            self.sock = tls.wrap_socket(self.sock, server_hostname="localhost")
        self.correlation_id = 0

    def request(self, api: str, version: int, body: dict) -> dict:
        self.correlation_id += 1
        self.sock.sendall(encode_request(api, version, self.correlation_id, "moldau-wire-test", body))
        correlation_id, response = decode_response(api, version, recv_frame(self.sock))
        assert correlation_id == self.correlation_id, f"{api}: answer to {correlation_id}, not {self.correlation_id}"
        return response

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> "WireClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# --- client quotas: AlterClientQuotas / DescribeClientQuotas ---------------------------------------

def alter_quotas(c: "WireClient", entity: dict, ops: dict, validate_only: bool = False) -> list[int]:
    """Error codes of one entity's set (value) / remove (None) operations."""
    r = c.request("AlterClientQuotas", 1, {"validate_only": validate_only, "entries": [{
        "entity": [{"entity_type": t, "entity_name": n} for t, n in entity.items()],
        "ops": [{"key": k, "value": v or 0.0, "remove": v is None} for k, v in ops.items()]}]})
    return [e["error_code"] for e in r["entries"]]


def describe_quotas(c: "WireClient", components: list[tuple[str, int, str | None]], strict=False) -> dict:
    r = c.request("DescribeClientQuotas", 1, {"strict": strict, "components": [
        {"entity_type": t, "match_type": m, "match": n} for t, m, n in components]})
    assert r["error_code"] == 0, r
    return {tuple((e["entity_type"], e["entity_name"]) for e in entry["entity"]):
            {v["key"]: v["value"] for v in entry["values"]} for entry in r["entries"]}


# --- broker configs: IncrementalAlterConfigs / DescribeConfigs on BROKER resources ---------------------
# (librdkafka refuses a BROKER resource without a name, the cluster default, and sends a named one to that
# broker only)

def alter_broker_configs(c: "WireClient", name: str, configs: dict, validate_only: bool = False,
                         resource_type: int = 4) -> tuple[int, str]:
    """SET each config (DELETE for None) of BROKER ``name`` ("" for the cluster default), or of another
    resource type's: (error code, message)."""
    r = c.request("IncrementalAlterConfigs", 1, {"validate_only": validate_only, "resources": [
        {"resource_type": resource_type, "resource_name": name, "configs": [
            {"name": k, "config_operation": 0 if v is not None else 1, "value": v} for k, v in configs.items()]}]})
    (result,) = r["responses"]
    return result["error_code"], result["error_message"]


def describe_broker_configs(c: "WireClient", name: str, resource_type: int = 4) -> dict[str, tuple[str | None, int]]:
    """BROKER ``name``'s configs (or another resource type's): name -> (value, source)."""
    r = c.request("DescribeConfigs", 4, {"resources": [{"resource_type": resource_type, "resource_name": name,
                                                        "configuration_keys": None}],
                                         "include_synonyms": False, "include_documentation": False})
    (result,) = r["results"]
    assert result["error_code"] == 0, result
    return {e["name"]: (e["value"], e["config_source"]) for e in result["configs"]}


GROUP = 32  # the GROUP resource type: group configs


def alter_group_configs(c: "WireClient", group: str, configs: dict) -> tuple[int, str]:
    return alter_broker_configs(c, group, configs, resource_type=GROUP)


def describe_group_configs(c: "WireClient", group: str) -> dict[str, tuple[str | None, int]]:
    return describe_broker_configs(c, group, resource_type=GROUP)
