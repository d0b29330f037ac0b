"""Keeps the benchmark harness (bench/) from rotting: two quick rows against Moldau alone.

This checks that the harness runs and that its rows verify what they
measure; it asserts nothing about speed. It needs psutil, which `make bench`
installs; without it the test is skipped.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("psutil", reason="the benchmark harness needs psutil (make bench installs it)")
pytest.importorskip("confluent_kafka")

REPO_ROOT = Path(__file__).resolve().parents[2]
ROWS = ["consume 20,000 x 1 KiB, 16p, lz4", "small requests"]


@pytest.mark.timeout(120)
def test_quick_rows_against_moldau(tmp_path):
    args = [sys.executable, "-m", "bench", "--quick", "--repeat", "1", "--servers", "moldau", "--out", str(tmp_path)]
    for row in ROWS:
        args += ["--rows", row]
    proc = subprocess.run(args, cwd=REPO_ROOT, capture_output=True, text=True, timeout=110)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    (result_file,) = tmp_path.glob("*/results.json")
    result = json.loads(result_file.read_text())
    ids = [row["id"] for row in result["rows"]]
    # the consume row brings the produce row it reads back
    assert ids == ["produce 20,000 x 1 KiB, 16p, lz4", "consume 20,000 x 1 KiB, 16p, lz4",
                   "small requests, 8 producers x 2,000"]
    for row in result["rows"]:
        outcome = row["servers"]["moldau"]
        assert outcome["valid"], f"{row['id']}: {outcome['reason']}"
        assert outcome["metrics"][row["primary"]] > 0
        assert outcome["broker"]["cpu_s"] >= 0 and outcome["broker"]["peak_rss_mib"] > 0
    assert "Moldau/peer" in proc.stdout
