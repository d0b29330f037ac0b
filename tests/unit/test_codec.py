"""The sans-io codec (protocol/) on the messages the logic above speaks: request and response frames,
version differences, record batches and their compression, and refusals of bad bytes."""

from __future__ import annotations

import uuid

import pytest

from protocol import codec, frames
from protocol.compression import CODECS, compress, decompress
from protocol.records import build_batch, iter_records, parse_produce_records, read_header


def roundtrip(name: str, version: int, message: dict) -> dict:
    data = codec.encode_bytes(name, version, message)
    decoded, end = codec.decode(name, version, data)
    assert end == len(data)
    assert codec.encode_bytes(name, version, decoded) == data, "re-encoding gives the same bytes"
    return decoded


@pytest.mark.parametrize("version", [0, 5, 9])
def test_join_group_request_across_versions(version):
    message = {"group_id": "g", "session_timeout_ms": 10_000, "rebalance_timeout_ms": 60_000, "member_id": "m",
               "group_instance_id": "i-1" if version >= 5 else None, "protocol_type": "consumer",
               "protocols": [{"name": "range", "metadata": b"\x00\x01"}], "reason": "because" if version >= 8 else None}
    decoded = roundtrip("JoinGroupRequest", version, message)
    assert decoded["protocols"] == [{"name": "range", "metadata": b"\x00\x01"}]
    assert decoded["rebalance_timeout_ms"] == (60_000 if version >= 1 else -1), "v0 has no rebalance timeout"
    assert decoded["group_instance_id"] == message["group_instance_id"]


def test_a_field_newer_than_the_version_is_not_written():
    old = codec.encode_bytes("JoinGroupRequest", 0, {"group_id": "g", "rebalance_timeout_ms": 5})
    new = codec.encode_bytes("JoinGroupRequest", 1, {"group_id": "g", "rebalance_timeout_ms": 5})
    assert len(new) == len(old) + 4


def test_consumer_group_heartbeat_carries_topic_ids_and_nullable_lists():
    tid = uuid.uuid4()
    message = {"group_id": "g", "member_id": "m", "member_epoch": 3, "instance_id": None, "rack_id": "r1",
               "rebalance_timeout_ms": -1, "subscribed_topic_names": None, "server_assignor": None,
               "topic_partitions": [{"topic_id": tid, "partitions": [0, 3]}]}
    decoded = roundtrip("ConsumerGroupHeartbeatRequest", 0, message)
    assert decoded["topic_partitions"] == [{"topic_id": tid, "partitions": [0, 3]}]
    assert decoded["subscribed_topic_names"] is None and decoded["rack_id"] == "r1"


def test_produce_request_keeps_its_record_bytes_whole():
    batch = build_batch([(b"k", b"v")], timestamp_ms=1)
    message = {"transactional_id": "tx", "acks": -1, "timeout_ms": 30_000,
               "topic_data": [{"name": "t", "partition_data": [{"index": 2, "records": batch}]}]}
    decoded = roundtrip("ProduceRequest", 9, message)
    assert bytes(decoded["topic_data"][0]["partition_data"][0]["records"]) == batch


def test_fetch_response_with_aborted_transactions():
    message = {"responses": [{"topic": "t", "partitions": [{
        "partition_index": 0, "high_watermark": 10, "last_stable_offset": 7, "log_start_offset": 0,
        "aborted_transactions": [{"producer_id": 5, "first_offset": 7}], "records": b"xyz"}]}]}
    partition = roundtrip("FetchResponse", 12, message)["responses"][0]["partitions"][0]
    assert partition["aborted_transactions"] == [{"producer_id": 5, "first_offset": 7}]
    assert (partition["high_watermark"], partition["last_stable_offset"]) == (10, 7)


@pytest.mark.parametrize("api,version,flexible", [("Metadata", 8, False), ("Metadata", 12, True),
                                                  ("Fetch", 11, False), ("Fetch", 12, True)])
def test_request_frames_carry_their_header(api, version, flexible):
    frame = frames.encode_request(api, version, 77, "client-é", {})
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    header = frames.decode_request_header(memoryview(frame)[4:])
    assert (header.api_key, header.api_version, header.correlation_id) == (frames.API_KEYS[api], version, 77)
    assert header.client_id == "client-é"
    assert frames.request_is_flexible(header.api_key, version) is flexible
    body, end = codec.decode(api + "Request", version, memoryview(frame)[4:], header.body_offset)
    assert end == len(frame) - 4


def test_a_response_frame_decodes_to_its_correlation_id_and_body():
    chunks = frames.response_chunks("Heartbeat", 4, 9, {"error_code": 27})
    frame = b"".join(bytes(c) for c in chunks)
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    assert frames.decode_response("Heartbeat", 4, frame[4:]) == (9, {"throttle_time_ms": 0, "error_code": 27})


@pytest.mark.parametrize("cut", [1, 5, 12])
def test_a_truncated_message_is_a_decode_error(cut):
    data = codec.encode_bytes("JoinGroupRequest", 9, {"group_id": "group", "member_id": "m"})
    with pytest.raises(codec.DecodeError):
        codec.decode("JoinGroupRequest", 9, data[:-cut])


def test_a_header_whose_client_id_overruns_the_frame_is_refused():
    frame = frames.encode_request("Metadata", 8, 1, "client", {})[4:]
    with pytest.raises(frames.FrameError):
        frames.decode_request_header(frame[:12])


def test_record_batches_round_trip_keys_values_and_headers():
    batch = build_batch([(b"k", b"v", [("h", b"1")]), (None, b"no key"), (b"tomb", None)],
                        base_offset=40, timestamp_ms=1234, producer_id=9, producer_epoch=2, base_sequence=5,
                        transactional=True)
    header = read_header(batch)
    assert (header.base_offset, header.last_offset, header.producer_id, header.base_sequence) == (40, 42, 9, 5)
    assert header.is_transactional and not header.is_control
    records = list(iter_records(batch))
    assert [(r.offset, r.key, r.value, r.headers) for r in records] == [
        (40, b"k", b"v", [("h", b"1")]), (41, None, b"no key", []), (42, b"tomb", None, [])]
    assert all(r.timestamp == 1234 for r in records)


def test_a_produce_buffer_of_several_batches_is_split_at_their_boundaries():
    a, b = build_batch([(b"a", b"1")], timestamp_ms=1), build_batch([(b"b", b"2")] * 3, timestamp_ms=2)
    parsed = parse_produce_records(bytearray(a + b))
    assert [(pos, h.records_count) for pos, h in parsed] == [(0, 1), (len(a), 3)]


@pytest.mark.parametrize("name", [n for n in CODECS if n != "uncompressed"])
def test_every_compression_codec_round_trips(name):
    data = b"moldau " * 1000
    packed = compress(CODECS[name], data)
    assert len(packed) < len(data) and decompress(CODECS[name], packed) == data
