"""README.md's command blocks, which tests run as written (tests/test_readme.py lists them)."""

from pathlib import Path

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()


def block(name: str) -> list[str]:
    """The commands (indented lines) between README's <!-- name ...--> and <!-- end name --> markers."""
    text = README.split(f"<!-- {name}")[1].split(f"<!-- end {name}")[0]
    return [line[4:] for line in text.splitlines() if line.startswith("    ")]
