"""Running the `moldau` admin tools as an operator does (a subprocess from the repository root) and reading
their output back: Kafka's "Key: value\tKey: value" lines and its fixed-width tables."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def moldau(tool: str, bootstrap: str, *args: str, config: Path | None = None, timeout: float = 60,
           stdin: str = "") -> subprocess.CompletedProcess:
    """``moldau <tool> --bootstrap-server <bootstrap> [--command-config <config>] <args>`` (tool may be two
    words: "cluster describe")."""
    extra = ["--command-config", str(config)] if config else []
    return subprocess.run([sys.executable, "-m", "broker", *tool.split(), "--bootstrap-server", bootstrap, *extra,
                           *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=timeout, input=stdin)


def ok(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 0, f"exit {result.returncode}\nstdout: {result.stdout}\nstderr: {result.stderr}"
    return result.stdout


def one_line_failure(result: subprocess.CompletedProcess, *expected: str) -> str:
    """The tool failed with one line on stderr (no traceback) containing ``expected``."""
    lines = result.stderr.strip().splitlines()
    assert result.returncode != 0 and len(lines) == 1 and "Traceback" not in result.stderr, result
    for text in expected:
        assert text in lines[0], lines[0]
    return lines[0]


def fields(line: str) -> dict[str, str]:
    """``Topic: t\tPartition: 0\tLeader: 1`` -> {"Topic": "t", "Partition": "0", "Leader": "1"}."""
    found = {}
    for cell in line.strip("\t").split("\t"):
        key, _, value = cell.partition(": ")
        found[key] = value
    return found


def table(text: str) -> list[dict[str, str]]:
    """Rows of the whitespace-separated table whose header is the first non-empty line (cells hold no spaces)."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return []
    header = lines[0].split()
    return [dict(zip(header, line.split(), strict=False)) for line in lines[1:]]
