"""`make run` installs the broker's runtime dependencies only; `make test` the test stack."""

import subprocess
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def make_dry_run(target: str, venv: Path) -> list[str]:
    out = subprocess.run(["make", "-n", target, f"VENV={venv}"], cwd=REPO_ROOT, capture_output=True, text=True,
                         check=True, timeout=30)
    return [line for line in out.stdout.splitlines() if "pip install" in line]


def test_make_run_installs_only_the_broker(tmp_path):
    assert make_dry_run("run", tmp_path / "venv") == [f"{tmp_path}/venv/bin/pip install -q -c constraints.txt -e ."]


def test_make_test_installs_the_test_stack(tmp_path):
    assert f"{tmp_path}/venv/bin/pip install -q -c constraints.txt -e '.[test]'" in make_dry_run("test", tmp_path / "venv")
