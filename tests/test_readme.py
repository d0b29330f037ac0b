"""README promises: the API table matches ApiVersions, and the two commands exist."""

import re
import subprocess
import sys
from pathlib import Path

from broker.handlers import HANDLERS

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def test_api_table_matches_what_the_broker_advertises():
    table = README.split("<!-- api-table")[1].split("<!-- end api-table")[0]
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
    from broker.config import SETTINGS

    out = subprocess.run([sys.executable, "-m", "broker", "serve", "--help"], cwd=ROOT,
                         capture_output=True, text=True, timeout=60).stdout
    for setting in SETTINGS:
        assert setting.name in out
        assert f"`{setting.name}`" in README
