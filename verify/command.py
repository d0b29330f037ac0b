"""`moldau verify`: a subcommand the broker's CLI finds through the `moldau.commands` entry points,
so the broker never imports the verifier (or its client library) itself."""

from __future__ import annotations

import logging
import sys
from pathlib import Path


def add_parser(sub) -> None:
    check = sub.add_parser(
        "verify",
        help="check a workload's topics against its journal",
        description="Read back the topics a workload journal names (read_committed and read_uncommitted) and "
                    "check: no acknowledged record lost, none duplicated, order kept per partition, transactions "
                    "all-or-nothing, nothing aborted visible, group offsets never past processed records. "
                    "Exits 0 if all hold, 1 on a violation, 2 if the topics could not be read.",
    )
    check.add_argument("journal", help="the journal directory (*.jsonl files written by verify.workloads)")
    check.add_argument("--bootstrap", default="127.0.0.1:9092", help="broker address (default %(default)s)")
    check.add_argument("--timeout", type=float, default=60.0, help="seconds allowed for reading (default %(default)s)")
    check.add_argument("--json", metavar="FILE", help="also write the verdict as JSON to FILE")


def run(args, rest: list[str]) -> int:
    if rest:
        print(f"moldau verify: unrecognized arguments: {' '.join(rest)}", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        from .checker import main
    except ImportError as exc:
        print(f"moldau verify needs confluent-kafka (pip install 'moldau[verify]'): {exc}", file=sys.stderr)
        return 2
    return main(args.bootstrap, Path(args.journal), args.timeout, Path(args.json) if args.json else None)
