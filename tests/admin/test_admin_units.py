"""The admin tools' pure parts, in process: version negotiation, bootstrap and --command-config parsing, and the
value formats Kafka's tools print or accept."""

from __future__ import annotations

import datetime
import ssl
import struct
import uuid

import pytest

from broker.admin import client, configs, consumer_groups, topics
from broker.admin.client import AdminError, parse_bootstrap
from broker.admin.command import UsageError
from broker.cluster.client_security import from_properties
from broker.config.broker_config import ConfigError
from protocol.frames import API_KEYS


def test_negotiation_takes_the_highest_version_both_sides_and_the_bodies_have():
    address = ("h", 1)
    fetch, metadata = API_KEYS["OffsetFetch"], API_KEYS["Metadata"]
    assert client.AdminClient._negotiate(address, "Metadata", {metadata: (0, 99)}) == 13, "the codec's highest"
    assert client.AdminClient._negotiate(address, "Metadata", {metadata: (0, 9)}) == 9, "the broker's highest"
    assert client.AdminClient._negotiate(address, "OffsetFetch", {fetch: (0, 10)}) == 9, "v10 names topics by id"
    with pytest.raises(AdminError, match="h:1 does not serve Metadata .*serves no version"):
        client.AdminClient._negotiate(address, "Metadata", {})
    with pytest.raises(AdminError, match="serves versions 0-0"):
        client.AdminClient._negotiate(address, "OffsetFetch", {fetch: (0, 0)})


def test_bootstrap_addresses():
    assert parse_bootstrap("a:1, b:2,[::1]:3") == [("a", 1), ("b", 2), ("::1", 3)]
    for bad in ("a", "a:b", "a:0", "a:70000", ""):
        with pytest.raises(AdminError, match="is not host:port"):
            parse_bootstrap(bad)


def test_client_security_from_properties(tmp_path):
    assert from_properties({}).ssl_context is None and from_properties({}).mechanism is None
    jaas = ('org.apache.kafka.common.security.scram.ScramLoginModule required username="bob" '
            'password="s\\"cret";')
    scram = from_properties({"security.protocol": "sasl_plaintext", "sasl.mechanism": "SCRAM-SHA-512",
                             "sasl.jaas.config": jaas})
    assert (scram.mechanism, scram.username, scram.password) == ("SCRAM-SHA-512", "bob", 's"cret')
    plain = from_properties({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.username": "a",
                             "sasl.password": "p", "ssl.endpoint.identification.algorithm": ""})
    assert plain.ssl_context.check_hostname is False and plain.ssl_context.verify_mode == ssl.CERT_REQUIRED
    for properties, named in (({"security.protocol": "TLS"}, "security.protocol=TLS"),
                              ({"security.protocol": "SASL_PLAINTEXT"}, "sasl.mechanism=GSSAPI"),
                              ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN"}, "sasl.jaas.config"),
                              ({"security.protocol": "SSL", "ssl.truststore.location": str(tmp_path / "none.pem")},
                               "ssl.*")):
        with pytest.raises(ConfigError, match=named.replace("*", r"\*")):
            from_properties(properties)


def test_add_config_values_group_commas_in_brackets():
    assert configs.parse_add_config("a=1, b=[x,y],c=") == {"a": "1", "b": "x,y", "c": ""}
    assert configs.parse_add_config("SCRAM-SHA-256=[iterations=8192,password=p=q]") == {
        "SCRAM-SHA-256": "iterations=8192,password=p=q"}
    with pytest.raises(UsageError, match="key=value"):
        configs.parse_add_config("novalue")
    assert configs._scram_credential("SCRAM-SHA-256", "password=x") == (4096, "x")
    assert configs._scram_credential("SCRAM-SHA-256", "iterations=8192,password=a,b") == (8192, "a,b")


def test_doubles_print_as_java_does():
    assert [configs.java_double(v) for v in (1024.0, 50, 2e7, 0.0, 1.5e-4, 12345678.9)] == [
        "1024.0", "50.0", "2.0E7", "0.0", "1.5E-4", "1.23456789E7"]


def test_datetimes_and_topic_ids():
    at = consumer_groups.parse_datetime("2024-03-01T12:00:00.000+00:00")
    assert at == int(datetime.datetime(2024, 3, 1, 12, tzinfo=datetime.timezone.utc).timestamp() * 1000)
    assert consumer_groups.parse_datetime("2024-03-01T12:00:00Z") == at
    local = consumer_groups.parse_datetime("2024-03-01T12:00:00.000")
    assert local == int(datetime.datetime(2024, 3, 1, 12).astimezone().timestamp() * 1000), "the local zone"
    with pytest.raises(UsageError):
        consumer_groups.parse_datetime("yesterday")
    assert topics.topic_id(uuid.UUID(bytes=bytes([0xfb] * 16))) == "-_v7-_v7-_v7-_v7-_v7-w"


def test_consumer_assignment_bytes():
    def assignment(topics: dict[str, list[int]]) -> bytes:
        out = struct.pack(">hi", 1, len(topics))
        for name, partitions in topics.items():
            out += struct.pack(">h", len(name)) + name.encode() + struct.pack(f">i{len(partitions)}i", len(partitions),
                                                                            *partitions)
        return out + struct.pack(">i", -1)  # no user data

    assert client._assigned(assignment({"a": [0, 2], "b": [1]})) == [("a", 0), ("a", 2), ("b", 1)]
    assert client._assigned(b"") == [] and client._assigned(b"\x00\x01\x00\x00\x00\x05xx") == []


def test_a_broker_that_never_answers_is_a_timeout_in_one_line():
    import asyncio

    async def main() -> tuple[int, str]:
        held = []

        async def accept(reader, writer):  # takes the request, never answers
            held.append(writer)

        server = await asyncio.start_server(accept, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            async with client.AdminClient(f"127.0.0.1:{port}", timeout_s=0.3):
                return port, "no error"
        except AdminError as exc:
            return port, str(exc)
        finally:
            server.close()
            for writer in held:
                writer.close()

    port, message = asyncio.run(main())
    assert message == f"ApiVersions to 127.0.0.1:{port}: no answer within 0.3 s"


def test_group_types_and_kip1099_member_columns(capsys):
    assert [client.group_type(g) for g in ({"group_id": "a"}, {"group_type": "Consumer"}, {"group_type": "share"},
                                           {"group_type": ""})] == ["classic", "consumer", "share", "classic"]
    coordinator = client.Broker(1, "h", 9092)
    member = client.GroupMember("m1", None, "c1", "/h", [("t", 1), ("t", 0), ("u", 2)], 7, [("t", 0), ("t", 1)])
    new = client.GroupDescription("g", "Reconciling", "consumer", "uniform", [member], coordinator, "consumer", 8, 8)
    consumer_groups._print_members(new, verbose=True)
    header, row = capsys.readouterr().out.split("\n")[1:3]
    assert header.split() == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "CURRENT-EPOCH",
                              "CURRENT-ASSIGNMENT", "TARGET-EPOCH", "TARGET-ASSIGNMENT"]
    assert row.split() == ["g", "m1", "/h", "c1", "3", "7", "t:0,1;u:2", "8", "t:0,1"]
    classic = client.GroupDescription("g", "Stable", "consumer", "range", [member], coordinator)
    consumer_groups._print_members(classic, verbose=True)
    header, row = capsys.readouterr().out.split("\n")[1:3]
    assert header.split()[-2:] == ["#PARTITIONS", "ASSIGNMENT"] and row.split()[-1] == "t:0,1;u:2"
    consumer_groups._print_state(new, verbose=True)
    header, row = capsys.readouterr().out.split("\n")[1:3]
    assert header.split()[-4:] == ["STATE", "GROUP-EPOCH", "TARGET-ASSIGNMENT-EPOCH", "#MEMBERS"]
    assert row.split()[-5:] == ["uniform", "Reconciling", "8", "8", "1"]
