"""The console's pure parts in process: how records are decoded (read_committed drops aborted transactions and
markers as a Kafka consumer does) and shown, the lag history and its chart, the page cache, and the read-only
guard that refuses a write before any connection is made."""

from __future__ import annotations

import asyncio
import json

import pytest

from broker.console.app import MAX_ROWS, Cache, make_app
from broker.console.state import TopicRow
from broker.console.client import ConsoleClient, ReadOnly
from broker.console.lag import SAMPLES, LagHistory, chart
from broker.console.records import SHOWN_BYTES, decode, show
from protocol.records import CONTROL_ABORT, CONTROL_COMMIT, build_batch, control_batch, set_base_offset


def _at(batch: bytes, offset: int) -> bytes:
    out = bytearray(batch)
    set_base_offset(out, 0, offset)
    return bytes(out)


def test_read_committed_drops_aborted_transactions_and_markers():
    plain = _at(build_batch([(b"k0", b"plain")]), 0)
    committed = _at(build_batch([(b"k1", b"c1"), (b"k2", b"c2")], producer_id=5, producer_epoch=0, base_sequence=0,
                                transactional=True), 1)
    aborted = _at(build_batch([(b"k3", b"a3")], producer_id=7, producer_epoch=0, base_sequence=0,
                              transactional=True), 3)
    commit = _at(control_batch(CONTROL_COMMIT, 5, 0, 0), 4)
    abort = _at(control_batch(CONTROL_ABORT, 7, 0, 0), 5)
    after = _at(build_batch([(b"k6", b"again")], producer_id=7, producer_epoch=0, base_sequence=1,
                            transactional=True), 6)
    records = plain + committed + aborted + commit + abort + after
    listed = [{"producer_id": 7, "first_offset": 3}]
    found, next_offset = decode(records, True, listed)
    assert [r.value for r in found] == [b"plain", b"c1", b"c2", b"again"]  # pid 7's later transaction is not aborted
    assert next_offset == 7
    found, _ = decode(records, False, [])
    assert [r.offset for r in found] == [0, 1, 2, 3, 6]
    # a fetch cut in the middle of a batch: the whole batches before it, and where to go on
    found, next_offset = decode(records[:len(plain) + 10], True, [])
    assert [r.offset for r in found] == [0] and next_offset == 1
    assert decode(b"", True, []) == ([], None)


def test_values_show_as_json_text_or_hex():
    assert show(None).kind == "null"
    shown = show(b'{"a": [1, 2]}')
    assert shown.kind == "json" and json.loads(shown.text) == {"a": [1, 2]} and "\n" in shown.text
    assert (show(b"hello\tworld").kind, show(b"hello\tworld").text) == ("text", "hello\tworld")
    assert show(b"{not json").kind == "text"
    assert (show(b"\x00\xff\x10").kind, show(b"\x00\xff\x10").text) == ("hex", "00 ff 10")
    assert show(b"bell\x07").kind == "hex"  # control characters are not text
    big = show(b"x" * (SHOWN_BYTES + 10))
    assert big.kind == "text" and len(big.text) == SHOWN_BYTES and big.cut == 10


def test_lag_history_keeps_a_bounded_series_and_charts_it():
    history = LagHistory()
    for i in range(SAMPLES + 5):
        history.add("g", i, now=1000.0 + 5 * i)
    samples = history.samples("g")
    assert len(samples) == SAMPLES and samples[-1] == (1000.0 + 5 * (SAMPLES + 4), SAMPLES + 4)
    history.add("g", 1, now=samples[-1][0] + 0.1)  # a second open page's look replaces the last sample
    assert len(history.samples("g")) == SAMPLES and history.samples("g")[-1][1] == 1
    drawn = chart([(0.0, 0), (5.0, 10), (10.0, 5)], width=100, height=50)
    assert drawn.points == "0.0,50.0 50.0,0.0 100.0,25.0" and drawn.max_lag == 10 and drawn.span_s == 10
    assert chart([]).points == ""


def test_the_cache_shares_one_computation_and_forgets_failures_soon():
    calls = []

    async def compute():
        calls.append(1)
        await asyncio.sleep(0.01)
        return len(calls)

    async def failing():
        calls.append(1)
        raise ValueError("down")

    async def main():
        cache = Cache()
        assert await asyncio.gather(*(cache.get(("k",), compute) for _ in range(5))) == [1] * 5
        assert await cache.get(("k",), compute) == 1 and len(calls) == 1
        with pytest.raises(ValueError):
            await cache.get(("f",), failing)
        with pytest.raises(ValueError):
            await cache.get(("f",), failing)  # within ERROR_CACHE_S: the same failure, not asked again
        assert len(calls) == 2

    asyncio.run(main())


def test_a_read_only_console_refuses_writes_before_connecting():
    async def main():
        client = ConsoleClient("127.0.0.1:1", timeout_s=1)  # nothing listens there
        for api in ("WriteTxnMarkers", "CreateTopics", "OffsetCommit", "DeleteRecords", "IncrementalAlterConfigs"):
            with pytest.raises(ReadOnly):
                await client.send(api, {})
        assert not client.sent  # not even ApiVersions

    asyncio.run(main())


def test_a_table_shows_at_most_max_rows_and_says_how_many_more():
    console = make_app(ConsoleClient("127.0.0.1:1"), "127.0.0.1:1").state.console
    rows = [TopicRow(f"t{i:04}", False, 1, 1, 0, 0, None) for i in range(MAX_ROWS + 7)]
    html = console.templates.get_template("topics.html").render(
        topics=rows, q="", bootstrap="b", refresh_s=5, allow_writes=False, max_rows=MAX_ROWS, requests_last_minute=0,
        path="/topics")
    assert html.count('<tr id="topic-') == MAX_ROWS and "7 more not shown" in html
