"""Cross-check against an independent codec: kafka-python's protocol classes.

kafka-python 3 ships the same Kafka JSON definitions our messages.json is cut
from, but its encoder and decoder are its own code. Two kinds of checks:

* schema-driven, for every advertised (API, version), request and response:
  the same sample message encoded by both libraries must give the same bytes,
  and each library must decode the other's bytes to the same values;
* hand-written requests, built the way a kafka-python client builds them and
  framed with kafka-python's own request header, read back through our frame
  decoder; and our framed responses read by kafka-python.
"""

from __future__ import annotations

import uuid

import kafka.protocol.admin
import kafka.protocol.consumer
import kafka.protocol.metadata
import kafka.protocol.producer
import kafka.protocol.sasl
import pytest
from kafka.protocol.schemas.fields.codecs import BitField
from kafka.protocol.schemas.fields.simple import SimpleField

from protocol import codec, frames, records
from protocol.codec import snake
from schema_samples import (
    POPULATED,
    VARIANTS,
    advertised_versions,
    differences,
    message_fields,
    params,
    present,
    sample,
    sample_records,
)

KP_MODULES = (kafka.protocol.metadata, kafka.protocol.consumer, kafka.protocol.producer, kafka.protocol.admin,
              kafka.protocol.sasl)


def kp_class(name: str):
    for module in KP_MODULES:
        if hasattr(module, name):
            return getattr(module, name)
    raise LookupError(f"kafka-python has no {name}")


# --- converting between our dicts and kafka-python's data objects -------------


def _paired_fields(kp_struct, fields: list) -> list:
    """Our schema fields next to kafka-python's, in schema order."""
    kp_fields = list(kp_struct._fields)
    assert len(kp_fields) == len(fields), f"{kp_struct.name}: field lists differ"
    for kp_field, field in zip(kp_fields, fields, strict=False):
        # kafka-python renames its *AuthorizedOperations ints to a "bitfield"
        assert _is_bitfield(kp_field) or kp_field.name == snake(field["name"]), (kp_field.name, field["name"])
    return list(zip(kp_fields, fields, strict=False))


def _is_bitfield(kp_field) -> bool:
    return isinstance(kp_field, SimpleField) and kp_field._type is BitField


def _element_struct(kp_field):
    return kp_field.array_of if kp_field.is_struct_array() else kp_field


def _convert_structs(kp_field, value, convert_one):
    """Apply ``convert_one`` to a struct, or to each element of a struct array."""
    return [convert_one(v) for v in value] if kp_field.is_struct_array() else convert_one(value)


def to_kp_fields(kp_struct, fields: list, version: int, message: dict) -> dict:
    return {
        kp_field.name: _to_kp_value(kp_field, field, version, message[snake(field["name"])])
        for kp_field, field in _paired_fields(kp_struct, fields)
        if present(field, version)
    }


def _to_kp_value(kp_field, field: dict, version: int, value):
    if value is None:
        return None
    if kp_field.is_struct_array() or kp_field.is_struct():
        struct = _element_struct(kp_field)
        return _convert_structs(kp_field, value, lambda v: kp_field.data_class(**to_kp_fields(struct, field["fields"], version, v)))
    if _is_bitfield(kp_field):
        bits = BitField.from_32_bit_field(value)
        return None if bits == {31} else bits
    return bytes(value) if field["type"] == "records" else value


def from_kp_fields(kp_struct, fields: list, version: int, obj) -> dict:
    return {
        snake(field["name"]): _from_kp_value(kp_field, field, version, getattr(obj, kp_field.name))
        for kp_field, field in _paired_fields(kp_struct, fields)
        if present(field, version)
    }


def _from_kp_value(kp_field, field: dict, version: int, value):
    if _is_bitfield(kp_field):
        unsigned = BitField.to_32_bit_field({31} if value is None else value)
        return unsigned - (1 << 32) if unsigned >= 1 << 31 else unsigned
    if value is None:
        return None
    if kp_field.is_struct_array() or kp_field.is_struct():
        struct = _element_struct(kp_field)
        return _convert_structs(kp_field, value, lambda v: from_kp_fields(struct, field["fields"], version, v))
    return bytes(value) if field["type"] == "records" else value


def kp_message(name: str, version: int, message: dict):
    cls = kp_class(name)
    return cls[version](**to_kp_fields(cls._struct, message_fields(name), version, message))


def kp_decode(name: str, version: int, data: bytes) -> dict:
    cls = kp_class(name)
    obj = cls.decode(bytes(data), version=version)
    return from_kp_fields(cls._struct, message_fields(name), version, obj)


# --- schema-driven: every advertised version ---------------------------------


def cross_sample(name: str, version: int, variant: str) -> dict:
    message = sample(name, version, variant)
    if name == "ApiVersionsResponse":
        # kafka-python reads any ApiVersions response with an error as v0,
        # as Kafka's clients do (that is what a broker sends for an
        # unsupported version); a successful response exercises every field
        message["error_code"] = 0
    return message


# APIs kafka-python 3 has no classes for (KIP-848's, KIP-932's): their codec is checked by librdkafka and Java
# kafka-clients 4.x speaking them (tests/integration/test_consumer_group_protocol*.py, test_share_groups.py)
# and by test_roundtrip
NOT_IN_KAFKA_PYTHON = {"ConsumerGroupHeartbeat", "ConsumerGroupDescribe", "ShareGroupHeartbeat", "ShareGroupDescribe",
                       "ShareFetch", "ShareAcknowledge", "DescribeShareGroupOffsets", "AlterShareGroupOffsets",
                       "DeleteShareGroupOffsets", "ReadShareGroupState", "WriteShareGroupState",
                       "DeleteShareGroupState", "InitializeShareGroupState", "ReadShareGroupStateSummary"}
CROSS_CASES = [(name, version, variant) for name, version in advertised_versions() for variant in VARIANTS
               if name.removesuffix("Request").removesuffix("Response") not in NOT_IN_KAFKA_PYTHON]


@pytest.mark.parametrize("name,version,variant", params(CROSS_CASES))
def test_same_bytes_as_kafka_python(name, version, variant):
    message = cross_sample(name, version, variant)
    ours = codec.encode_bytes(name, version, message)
    theirs = bytes(kp_message(name, version, message).encode(version=version))

    decoded, end = codec.decode(name, version, theirs)
    assert differences(name, version, message, decoded) == [], "our decoding of kafka-python's bytes"
    assert end == len(theirs)
    assert differences(name, version, message, kp_decode(name, version, ours)) == [], "kafka-python's decoding of ours"
    assert ours == theirs


# --- hand-written kafka-python requests through our frame decoder -------------

TOPIC_ID = uuid.UUID("0b6f3c1e-9d0a-4c55-8f5e-1e2d3c4b5a69")


def kp_request_frame(request, correlation_id: int, client_id: str | None) -> bytes:
    request.with_header(correlation_id=correlation_id, client_id=client_id)
    return bytes(request.encode(header=True, framed=True))


def read_request(frame_bytes: bytes, api: str, version: int) -> tuple[frames.RequestHeader, dict]:
    """What the broker does with one request frame off the socket."""
    (frame,) = frames.FrameDecoder(max_size=1 << 20).feed(frame_bytes)
    header = frames.decode_request_header(frame)
    assert (frames.API_NAMES[header.api_key], header.api_version) == (api, version)
    body, end = codec.decode(api + "Request", version, frame, header.body_offset)
    assert end == len(frame), "request body not consumed exactly"
    return header, body


def metadata_request(version: int):
    cls = kafka.protocol.metadata.MetadataRequest
    topics = [cls.MetadataRequestTopic(name="orders"), cls.MetadataRequestTopic(name="payments")]
    if version >= 10:
        topics[0].topic_id = TOPIC_ID
    kwargs = {"allow_auto_topic_creation": False} if version >= 4 else {}
    if version >= 8:
        kwargs["include_topic_authorized_operations"] = True
    return cls[version](topics=topics, **kwargs)


@pytest.mark.parametrize("version", [1, 9, 12])
def test_kafka_python_metadata_request(version):
    header, body = read_request(kp_request_frame(metadata_request(version), 11, "kp-client"), "Metadata", version)
    assert (header.correlation_id, header.client_id) == (11, "kp-client")
    assert [t["name"] for t in body["topics"]] == ["orders", "payments"]
    if version >= 10:
        assert [t["topic_id"] for t in body["topics"]] == [TOPIC_ID, uuid.UUID(int=0)]
    if version >= 4:
        assert body["allow_auto_topic_creation"] is False
    if version >= 8:
        assert body["include_topic_authorized_operations"] is True


@pytest.mark.parametrize("version", [3, 9])
def test_kafka_python_produce_request(version):
    cls = kafka.protocol.producer.ProduceRequest
    batch = sample_records()
    partition = cls.TopicProduceData.PartitionProduceData(index=2, records=batch)
    request = cls[version](
        transactional_id="tx-1", acks=-1, timeout_ms=30_000,
        topic_data=[cls.TopicProduceData(name="orders", partition_data=[partition])],
    )
    _, body = read_request(kp_request_frame(request, 12, "kp-producer"), "Produce", version)
    assert (body["transactional_id"], body["acks"], body["timeout_ms"]) == ("tx-1", -1, 30_000)
    (topic,) = body["topic_data"]
    (part,) = topic["partition_data"]
    assert (topic["name"], part["index"], bytes(part["records"])) == ("orders", 2, batch)
    ((_, hdr),) = records.parse_produce_records(part["records"])
    assert (hdr.producer_id, hdr.base_sequence, hdr.records_count) == (4242, 17, 2)


@pytest.mark.parametrize("version", [4, 12, 13])
def test_kafka_python_fetch_request(version):
    cls = kafka.protocol.consumer.FetchRequest
    partition = cls.FetchTopic.FetchPartition(partition=3, fetch_offset=1 << 40, partition_max_bytes=1 << 20)
    topic_key = {"topic_id": TOPIC_ID} if version >= 13 else {"topic": "orders"}
    topic = cls.FetchTopic(partitions=[partition], **topic_key)
    request = cls[version](replica_id=-1, max_wait_ms=500, min_bytes=1, max_bytes=52_428_800, isolation_level=1, topics=[topic])
    _, body = read_request(kp_request_frame(request, 13, None), "Fetch", version)
    assert (body["max_wait_ms"], body["min_bytes"], body["max_bytes"], body["isolation_level"]) == (500, 1, 52_428_800, 1)
    (t,) = body["topics"]
    assert {key: t[key] for key in topic_key} == topic_key
    (p,) = t["partitions"]
    assert (p["partition"], p["fetch_offset"], p["partition_max_bytes"]) == (3, 1 << 40, 1 << 20)
    if version >= 12:
        assert body["cluster_id"] is None  # the tagged field was not sent


@pytest.mark.parametrize("version", [0, 3])
def test_kafka_python_api_versions_request(version):
    cls = kafka.protocol.metadata.ApiVersionsRequest
    kwargs = {"client_software_name": "kafka-python", "client_software_version": "3.0.12"} if version >= 3 else {}
    header, body = read_request(kp_request_frame(cls[version](**kwargs), 14, "kp"), "ApiVersions", version)
    assert header.client_id == "kp"
    if version >= 3:
        assert (body["client_software_name"], body["client_software_version"]) == ("kafka-python", "3.0.12")


@pytest.mark.parametrize("version", [1, 7])
def test_kafka_python_list_offsets_request(version):
    cls = kafka.protocol.consumer.ListOffsetsRequest
    partition = cls.ListOffsetsTopic.ListOffsetsPartition(partition_index=0, timestamp=-2)
    topic = cls.ListOffsetsTopic(name="orders", partitions=[partition])
    request = cls[version](replica_id=-1, isolation_level=1, topics=[topic])
    _, body = read_request(kp_request_frame(request, 15, "kp"), "ListOffsets", version)
    assert body["replica_id"] == -1
    if version >= 2:
        assert body["isolation_level"] == 1
    ((t, p),) = [(t, p) for t in body["topics"] for p in t["partitions"]]
    assert (t["name"], p["partition_index"], p["timestamp"]) == ("orders", 0, -2)


# --- our framed responses read by kafka-python ---------------------------------


@pytest.mark.parametrize(
    "api,version",
    [("ApiVersions", 0), ("ApiVersions", 3), ("Metadata", 1), ("Metadata", 12), ("Produce", 9), ("Fetch", 4), ("Fetch", 13), ("ListOffsets", 7)],
)
def test_kafka_python_reads_our_response_frames(api, version):
    name = api + "Response"
    message = cross_sample(name, version, POPULATED)
    frame = b"".join(frames.response_chunks(api, version, 77, message))
    decoded = kp_class(name).decode(frame, version=version, header=True, framed=True)
    assert decoded.header.correlation_id == 77
    converted = from_kp_fields(kp_class(name)._struct, codec.definition(name)["fields"], version, decoded)
    assert differences(name, version, message, converted) == []
