"""Run `moldau serve` when it is expected to refuse to start: its exit code and stderr."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def serve_refused(overrides: dict[str, object], *args: str, timeout: float = 60.0) -> subprocess.CompletedProcess:
    """`python -m broker serve [args] --override name=value...`; fails the test if the broker keeps running."""
    cmd = [sys.executable, "-m", "broker", "serve", *args]
    for name, value in overrides.items():
        cmd += ["--override", f"{name}={value}"]
    try:
        return subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"broker started instead of refusing: {' '.join(cmd)}") from None


def error_lines(result: subprocess.CompletedProcess) -> list[str]:
    """stderr lines that are not INFO log lines: what an operator is told."""
    return [line for line in result.stderr.splitlines() if line.strip() and " INFO " not in line]
