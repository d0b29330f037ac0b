"""ApiVersions from a real broker process: exactly the APIs and versions docs/apis.md lists (the table
tests/test_readme.py keeps equal to the handler registry), through kafka-python's admin client; the share
group APIs clients call only while group.share.enable is on; an unsupported ApiVersions version answered
in v0 form with the same list."""

import re
from pathlib import Path

from kafka import KafkaAdminClient

from helpers import wire

DOCS = Path(__file__).resolve().parents[2] / "docs" / "apis.md"
# KIP-932's client APIs: not advertised while share groups are off (the share coordinator's inter-broker
# APIs stay, as in Kafka)
SHARE_CLIENT_APIS = {"ShareGroupHeartbeat", "ShareGroupDescribe", "ShareFetch", "ShareAcknowledge",
                     "DescribeShareGroupOffsets", "AlterShareGroupOffsets", "DeleteShareGroupOffsets"}


def documented() -> dict[int, tuple[str, int, int]]:
    table = DOCS.read_text().split("<!-- api-table")[1].split("<!-- end api-table")[0]
    rows = re.findall(r"^\| (\w+) \| (\d+) \| (\d+)–(\d+) \|$", table, re.M)
    return {int(key): (name, int(lo), int(hi)) for name, key, lo, hi in rows}


def advertised(broker) -> dict[int, tuple[int, int]]:
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=10_000)
    try:
        return {int(key): tuple(versions) for key, versions in admin.api_versions().items()}
    finally:
        admin.close()


def test_api_versions_answers_the_documented_table(start_broker):
    broker = start_broker()
    expected = {key: (lo, hi) for key, (_, lo, hi) in documented().items()}
    assert len(expected) > 50
    assert advertised(broker) == expected
    with wire.connect(broker.port) as s:  # a version past ApiVersions' own: the v0 form, the same list
        s.sendall(wire.frame(wire.request_header_v1(wire.API_VERSIONS, 99, 5) + b"\0"))  # header v2: no tags
        corr, error, apis = wire.parse_api_versions_v0(wire.recv_frame(s))
    assert (corr, error) == (5, 35)  # UNSUPPORTED_VERSION
    assert apis == expected


def test_api_versions_leaves_out_share_client_apis_while_share_groups_are_off(start_broker):
    broker = start_broker(**{"group.share.enable": "false"})
    expected = {key: (lo, hi) for key, (name, lo, hi) in documented().items() if name not in SHARE_CLIENT_APIS}
    assert len(expected) == len(documented()) - len(SHARE_CLIENT_APIS)
    assert advertised(broker) == expected
