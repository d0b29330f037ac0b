"""protocol/fetch_answers.py encodes what the codec encodes for a partition with nothing to return."""

from __future__ import annotations

import pytest

from protocol import codec
from protocol.fetch_answers import nothing_to_return


def response(partition) -> dict:
    return {"throttle_time_ms": 0, "error_code": 0, "session_id": 0,
            "responses": [{"topic": "t", "topic_id": None, "partitions": [partition]}]}


@pytest.mark.parametrize("version", range(4, 19))
@pytest.mark.parametrize("read_committed", [False, True])
@pytest.mark.parametrize("offsets", [(0, 0, 0), (17, 12, 3), (2**62, 2**62 - 1, 2**61)])
def test_nothing_to_return_is_the_codecs_encoding(version, read_committed, offsets):
    high_watermark, last_stable_offset, log_start_offset = offsets
    as_dict = {"partition_index": 41, "error_code": 0, "high_watermark": high_watermark,
               "last_stable_offset": last_stable_offset, "log_start_offset": log_start_offset,
               "aborted_transactions": [] if read_committed else None, "preferred_read_replica": -1,
               "records": b"", "diverging_epoch": None}
    encoded = nothing_to_return(version, read_committed, 41, *offsets)
    assert isinstance(encoded, codec.Encoded)
    assert codec.encode_bytes("FetchResponse", version, response(encoded)) == \
        codec.encode_bytes("FetchResponse", version, response(as_dict))
    decoded, _ = codec.decode("FetchResponse", version, codec.encode_bytes("FetchResponse", version,
                                                                          response(encoded)))
    part = decoded["responses"][0]["partitions"][0]
    assert (part["partition_index"], part["high_watermark"]) == (41, high_watermark)
