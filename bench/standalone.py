"""The command line the benchmarks after the side-by-side rows share: `--quick` and `--out DIR`."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def arguments(name: str, description: str, argv=None) -> tuple[bool, Path]:
    """(quick, the directory for results.json: --out or bench/results/<name>-<time>/, created)."""
    parser = argparse.ArgumentParser(prog=f"python -m bench.{name}", description=description)
    parser.add_argument("--quick", action="store_true", help="fewer messages (a smoke run)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    out = args.out or RESULTS / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}"
    out.mkdir(parents=True, exist_ok=True)
    return args.quick, out
