"""README promises: the two commands exist, every command it shows is run by a test, the API table
(docs/apis.md) matches ApiVersions and the settings are all documented."""

import re
import subprocess
import sys
from pathlib import Path

from broker.handlers import HANDLERS
from helpers.readme import README, block

ROOT = Path(__file__).resolve().parent.parent
DOCS = {p.name: p.read_text() for p in (ROOT / "docs").glob("*.md")}
# README's command blocks, each run by a test: first-steps here, cluster-steps by tests/cluster/test_local_cluster.py
RUN_BLOCKS = ("first-steps", "cluster-steps")


def test_api_table_matches_what_the_broker_advertises():
    table = DOCS["apis.md"].split("<!-- api-table")[1].split("<!-- end api-table")[0]
    rows = re.findall(r"^\| (\w+) \| (\d+) \| (\d+)–(\d+) \|$", table, re.M)
    documented = {int(key): (name, int(lo), int(hi)) for name, key, lo, hi in rows}
    advertised = {key: (h.name, h.min_version, h.max_version) for key, h in HANDLERS.items()}
    assert documented == advertised


def test_readme_commands_are_make_targets():
    makefile = (ROOT / "Makefile").read_text()
    for target in ("run", "test"):
        assert f"    make {target}\n" in README
        assert re.search(rf"^{target}:", makefile, re.M)
    assert "make test" in (ROOT / ".ci" / "run").read_text()


def test_serve_help_lists_every_setting():
    from broker.config.broker_config import SETTINGS

    out = subprocess.run([sys.executable, "-m", "broker", "serve", "--help"], cwd=ROOT,
                         capture_output=True, text=True, timeout=60).stdout
    documented = DOCS["configuration.md"] + DOCS["cluster.md"] + DOCS["security.md"]
    for setting in SETTINGS:
        assert setting.name in out
        assert f"`{setting.name}`" in documented, setting.name


def test_every_readme_command_is_run_by_a_test():
    """A newcomer copies README's commands: each is `make run`/`make test` (above) or in a block a test runs."""
    unfenced = README.split("```")[::2]  # a fenced block is a program to read, not a command to copy
    commands = [line[4:] for text in unfenced for line in text.splitlines() if line.startswith("    ") and line.strip()]
    run = {"make run", "make test"} | {c for name in RUN_BLOCKS for c in block(name)}
    assert [c for c in commands if c not in run] == []
    assert len(README.splitlines()) < 200  # read in ten minutes; the long material is in docs/


def test_first_steps_work_as_written(start_broker):
    """The first-steps block, run against a broker started with its ARGS (ports moved to free ones)."""
    import shlex

    from conftest import free_port

    commands = block("first-steps")
    start, *shell_lines = [c for c in commands if not c.startswith(("from ", "p = ", "c = "))]
    python = "\n".join(c for c in commands if c.startswith(("from ", "p = ", "c = ")))
    metrics = free_port()
    args = shlex.split(shlex.split(start)[2].removeprefix("ARGS="))
    overrides = dict(args[i + 1].split("=", 1) for i in range(0, len(args), 2))
    b = start_broker({**overrides, "metrics.port": metrics})

    def here(text: str) -> str:
        return text.replace("127.0.0.1:9092", b.bootstrap).replace("127.0.0.1:9308", f"127.0.0.1:{metrics}")

    out = {}
    for line in shell_lines:
        result = subprocess.run(here(line), shell=True, capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, f"{line}: {result.stderr}"
        out[line] = result.stdout
    result = subprocess.run([sys.executable, "-c", here(python)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "b'hello from kcat'" in result.stdout and "b'hello from Python'" in result.stdout
    consumed, listed, scraped = (out[line] for line in shell_lines[1:])
    assert consumed.strip() == "hello from kcat"
    assert 'topic "greetings"' in listed
    assert 'kafka_server_brokertopicmetrics_messagesin_total{topic="greetings"}' in scraped
