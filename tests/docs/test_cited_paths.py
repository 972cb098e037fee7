"""Every path that docs/, the README, a docstring or a comment cites exists: a file moved or renamed takes its
citations with it (docs/decisions/0009-rooms.md)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("streams", "bindings", "tests", "config", "analytics", "platform", "bench", "docs", "docker", "templates")
CITED = re.compile(rf"(?<![\w./-])(?:{'|'.join(FOLDERS)})/[\w./-]*\.\w+")
SUFFIXES = {".md", ".py", ".toml", ".html", ".yaml", ".sh"}
# The decision record of the moves names the paths from before them on purpose.
NOT_CHECKED = {"docs/decisions/0009-rooms.md"}


def sources() -> list[Path]:
    found = [ROOT / "README.md", ROOT / "pyproject.toml"]
    for folder in FOLDERS:
        found += [p for p in (ROOT / folder).rglob("*") if p.suffix in SUFFIXES and p.is_file()]
    return [p for p in found if "migrations" not in p.parts and p.relative_to(ROOT).as_posix() not in NOT_CHECKED]


def exists(cited: str) -> bool:
    # a template name (`analytics/base.html`) is a path under templates/
    return (ROOT / cited).exists() or (ROOT / "templates" / cited).exists()


def missing_paths() -> list[str]:
    missing = []
    for source in sources():
        for number, line in enumerate(source.read_text(encoding="utf-8").splitlines(), 1):
            for match in CITED.finditer(line):
                cited = match.group(0).rstrip(".")
                if line[match.end() : match.end() + 1] == "*" or line[: match.start()].endswith("static '"):
                    continue  # a glob, or a path under a static folder
                if not exists(cited):
                    missing.append(f"{source.relative_to(ROOT)}:{number}: {cited}")
    return missing


def test_every_cited_path_exists() -> None:
    assert missing_paths() == []


@pytest.mark.parametrize("line", [f"see {FOLDERS[0]}/no_such_module.py", f"(`{FOLDERS[7]}/no-such-page.md`)"])
def test_a_path_that_does_not_exist_is_found(line: str) -> None:
    cited = CITED.search(line)
    assert cited is not None
    assert not exists(cited.group(0))
