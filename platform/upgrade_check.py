"""`make upgrade-check`: would the newest releases work? Installs them and runs the server and end-to-end tests.

    platform/with-services.sh -- .venv/bin/python platform/upgrade_check.py [PYTEST ARGS...]

Builds a scratch virtualenv under var/upgrade-check/ (made anew each run, .venv is left alone) with the newest
release of every package pyproject.toml declares, its dependencies and dev extra alike, with pyproject.toml's upper
bounds dropped (its floors and exclusions kept; the bounds other packages set on theirs still hold); prints which
packages moved from requirements-dev.lock and which are now past a bound of pyproject.toml; then runs pytest with
that environment's Python on tests/e2e and tests/streams/server (or the PYTEST ARGS given), against the embedded
services, with the checkout on PYTHONPATH, after ruff, mypy and import-linter from that environment (the dev extra's
checkers and stubs are what moves most often). Exits non-zero if any of them failed. The report is also kept in
var/upgrade-check/report.txt. The whole takes about half an hour on two cores, most of it tests/e2e.

What to do with the result is in docs/operations.md, "Python dependencies": a bound that held back a release the
tests pass with can go (then `make lock ARGS=--upgrade`); one whose release fails them says why in its comment.
Needs the network (PyPI) and uv from .venv; standard library only besides, as it runs before anything is decided.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRATCH = ROOT / "var" / "upgrade-check"
DEFAULT_TESTS = ("tests/e2e", "tests/streams/server")
REQUIREMENT = re.compile(
    r"^\s*(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)\s*(?P<extras>\[[^\]]*\])?\s*(?P<specifiers>[^;]*?)\s*(?P<marker>;.*)?$"
)
SPECIFIER = re.compile(r"(?P<operator>===|==|~=|!=|<=|>=|<|>)\s*(?P<version>[A-Za-z0-9.*+!_-]+)")
# Run with the scratch environment's Python, which has packaging (the dev extra's) to compare versions.
PAST_BOUNDS = """
import json, sys
from importlib import metadata
from packaging.requirements import Requirement
for line in json.loads(sys.argv[1]):
    requirement = Requirement(line)
    version = metadata.version(requirement.name)
    if not requirement.specifier.contains(version, prereleases=True):
        print(f"{requirement.name} {version}: pyproject.toml says {requirement}")
"""


def without_upper_bounds(requirement: str) -> str:
    """`requirement` with its `<`, `<=` and `==` bounds dropped (`==X` and `~=X` become `>=X`); `>=`, `>`, `!=`
    and the extras and marker kept."""
    match = REQUIREMENT.match(requirement)
    if match is None:
        raise ValueError(f"not a requirement this script reads: {requirement!r}")
    kept: list[str] = []
    for specifier in filter(None, (part.strip() for part in match["specifiers"].split(","))):
        parsed = SPECIFIER.fullmatch(specifier)
        if parsed is None:
            raise ValueError(f"not a version specifier this script reads: {specifier!r} in {requirement!r}")
        operator, version = parsed["operator"], parsed["version"]
        if operator in ("==", "~=", "==="):
            kept.append(f">={version.removesuffix('.*')}")
        elif operator in (">=", ">", "!="):
            kept.append(f"{operator}{version}")
    return f"{match['name']}{match['extras'] or ''}{','.join(kept)}{match['marker'] or ''}"


def declared() -> list[str]:
    with (ROOT / "pyproject.toml").open("rb") as file:
        project = tomllib.load(file)["project"]
    return [*project["dependencies"], *project["optional-dependencies"]["dev"]]


def past_bounds(python: Path) -> list[str]:
    """The declared requirements that do not admit the release installed in the scratch environment."""
    result = subprocess.run(
        [str(python), "-c", PAST_BOUNDS, json.dumps(declared())], capture_output=True, text=True, check=True
    )
    return result.stdout.splitlines()


def run(argv: list[str], env: dict[str, str]) -> None:
    print("+", " ".join(argv), flush=True)
    subprocess.run(argv, env=env, check=True)


def main(pytest_args: list[str]) -> int:
    uv = ROOT / ".venv" / "bin" / "uv"
    if not uv.exists():
        print(f"upgrade_check: {uv} missing: run platform/install.sh first", file=sys.stderr)
        return 1
    shutil.rmtree(SCRATCH, ignore_errors=True)
    SCRATCH.mkdir(parents=True)
    requirements = SCRATCH / "requirements.txt"
    requirements.write_text("".join(f"{without_upper_bounds(line)}\n" for line in declared()))
    venv = SCRATCH / "venv"
    python = venv / "bin" / "python"
    # The interpreter .venv runs on; uv must not fetch one of its own.
    env = {**os.environ, "UV_PYTHON_DOWNLOADS": "never"}
    run([str(uv), "venv", "--quiet", "--python", sys.executable, str(venv)], env=env)
    run([str(uv), "pip", "install", "--quiet", "--python", str(python), "-r", str(requirements)], env=env)

    moved = subprocess.run(
        [str(python), str(ROOT / "platform" / "lockfile.py"), "moved", str(ROOT / "requirements-dev.lock")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    report = ["Moved from requirements-dev.lock (name, locked, newest):", *(f"  {line}" for line in moved or ["none"])]
    report += ["Past a bound of pyproject.toml:", *(f"  {line}" for line in past_bounds(python) or ["none"])]
    print("\n".join(report), flush=True)

    # What moved most often is the dev extra's checkers and stubs: run them too, as make test does.
    bin_ = venv / "bin"
    tests = pytest_args or list(DEFAULT_TESTS)
    checks = {
        "ruff check": [str(bin_ / "ruff"), "check", "--no-cache", "."],
        "ruff format --check": [str(bin_ / "ruff"), "format", "--no-cache", "--check", "."],
        "mypy": [str(bin_ / "mypy"), "--cache-dir", str(SCRATCH / "mypy-cache"), "."],
        "lint-imports": [str(bin_ / "lint-imports"), "--no-cache"],
        f"pytest {' '.join(tests)}": [str(python), "-m", "pytest", "-p", "no:cacheprovider", "-q", *tests],
    }
    env = {**os.environ, "PYTHONPATH": str(ROOT), "DJANGO_SETTINGS_MODULE": "config.settings.test"}
    failed = 0
    for label, argv in checks.items():
        print("+", " ".join(argv), flush=True)
        status = subprocess.run(argv, cwd=ROOT, env=env, check=False).returncode
        report.append(f"{label}: {'passed' if status == 0 else f'failed (exit status {status})'}")
        failed = failed or status
    (SCRATCH / "report.txt").write_text("\n".join(report) + "\n")
    print("\n".join(report))
    return failed


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
