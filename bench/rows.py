"""What the benchmark measures: one Row per line of the result table."""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Kind:
    """How a kind of row is summed up: the metric its ratio is taken on, and what is shown beside it."""

    primary: str
    unit: str
    details: tuple[tuple[str, str], ...] = ()  # (metric, unit)
    higher_is_better: bool = True
    profiled: bool = False  # py-spy records Moldau under this kind with --profile


KINDS = {
    "produce": Kind("msgs_per_s", "msg/s", (("mb_per_s", "MB/s"),), profiled=True),
    "consume": Kind("msgs_per_s", "msg/s", (("mb_per_s", "MB/s"), ("ttfm_ms", "ms to 1st msg")), profiled=True),
    "transactions": Kind("tx_per_s", "tx/s", (("msgs_per_s", "msg/s"),)),
    "latency": Kind("p99_ms", "ms p99", (("p50_ms", "ms p50"), ("p999_ms", "ms p99.9"), ("samples", "samples")),
                    higher_is_better=False),
    "small-requests": Kind("requests_per_s", "req/s", profiled=True),
    "follow": Kind("broker_cpu_per_s", "broker CPU s/s", (("client_cpu_per_s", "client CPU s/s"),
                                                           ("consumer_cpu_per_s", "fetch loop CPU s/s"),
                                                           ("fetches_per_s", "fetches/s"),
                                                           ("broker_ms_per_fetch", "broker CPU ms/fetch")),
                   higher_is_better=False, profiled=True),
    "idle-fetch": Kind("broker_ms_per_fetch", "broker CPU ms/fetch", (("client_ms_per_fetch", "client CPU ms/fetch"),),
                       higher_is_better=False, profiled=True),
}


@dataclass(frozen=True)
class Row:
    id: str
    kind: str
    params: dict
    messages: int  # what the per-million CPU figure divides by
    reads: str | None = None  # consume rows: the produce row whose topic they read back
    needs: tuple[str, ...] = ()  # APIs a server must advertise to run the row
    idempotent: bool = False  # wants enable.idempotence where every server has InitProducerId
    timeout_s: float = 300

    def topic(self, repeat: int) -> str:
        return f"{slug(self.reads or self.id)}-r{repeat}"


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def _size(n: int) -> str:
    return f"{n // 1024} KiB" if n % 1024 == 0 else f"{n} B"


def plan(quick: bool) -> list[Row]:
    """Every row, in the order they run; ``quick`` moves ten times fewer messages."""
    scale = 10 if quick else 1
    rows = []
    for size, count in ((100, 1_000_000 // scale), (1024, 200_000 // scale)):
        for partitions in (1, 16):
            for compression in ("none", "lz4"):
                label = f"{count:,} x {_size(size)}, {partitions}p" + ("" if compression == "none" else f", {compression}")
                params = {"count": count, "size": size, "partitions": partitions}
                produce = Row(f"produce {label}", "produce", {**params, "compression": compression}, count,
                              idempotent=True)
                rows += [produce, Row(f"consume {label}", "consume", params, count, reads=produce.id)]
    txs = 100 // scale
    rows.append(Row(f"transactions {txs} x 1,000", "transactions",
                    {"transactions": txs, "per_transaction": 1000, "size": 100}, txs * 1000, needs=("EndTxn",)))
    samples = 10_000 // scale
    rows.append(Row("latency e2e, 100 B, acks=all", "latency",
                    {"count": samples, "warmup": 10, "size": 100, "budget_s": 10 if quick else 30}, samples))
    per = 20_000 // scale
    rows.append(Row(f"small requests, 8 producers x {per:,}", "small-requests",
                    {"producers": 8, "count_per_producer": per, "size": 100}, 8 * per))
    seconds = 8 if quick else 20
    for consumer in ("none", "sessions", "sessionless"):
        label = "producer alone" if consumer == "none" else f"consumer, {consumer}"
        rows.append(Row(f"2,000 partitions x 10 msg/s, {label}", "follow",
                        {"partitions": 2000, "rate": 10, "seconds": seconds, "consumer": consumer},
                        2000 * 10 * seconds))
    fetches = 50 if quick else 200
    for consumer in ("sessions", "sessionless"):
        rows.append(Row(f"fetch 2,000 partitions with nothing new, {consumer}", "idle-fetch",
                        {"partitions": 2000, "fetches": fetches, "consumer": consumer}, fetches))
    return rows


def select(rows: list[Row], patterns: list[str]) -> list[Row]:
    """Rows whose id contains any of ``patterns``, plus the produce rows the chosen consume rows read."""
    if not patterns:
        return rows
    chosen = {r.id for r in rows if any(p.lower() in r.id.lower() for p in patterns)}
    chosen |= {r.reads for r in rows if r.id in chosen and r.reads}
    return [r for r in rows if r.id in chosen]
