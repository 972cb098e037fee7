"""Every benchmark that takes options answers `--help`: bench/README.md sends readers there for the options, and an
unescaped `%` in one help text made argparse fail while formatting it, where no benchmark run would notice."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = sorted(
    path
    for path in (ROOT / "bench").glob("*.py")
    if "argparse" in (text := path.read_text()) and 'if __name__ == "__main__"' in text
)


def test_the_benchmarks_with_options_are_found() -> None:
    names = {path.name for path in SCRIPTS}
    assert {"fanout.py", "loadgen.py", "baseline_server.py"} <= names
    assert "harness.py" not in names  # a module the scripts import, with no command line of its own


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda path: path.name)
def test_a_benchmark_answers_help(script: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(script), "--help"], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "usage:" in done.stdout
