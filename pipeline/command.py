"""`moldau pipeline`: a subcommand the broker's CLI finds through the `moldau.commands` entry points,
so the broker never imports the pipeline (or Spark) itself. The pipeline parses its own arguments."""

from __future__ import annotations

import sys


def add_parser(sub) -> None:
    sub.add_parser("pipeline", add_help=False, help="the Spark Structured Streaming pipeline (pipeline/)")


def run(args, rest: list[str]) -> int:
    try:
        from .cli import main
    except ImportError as exc:
        print(f"moldau pipeline needs Spark (pip install 'moldau[pipeline]'): {exc}", file=sys.stderr)
        return 2
    return main(rest)
