"""What a lock file pins (requirements-dev.lock, requirements.lock), and how an environment differs from it.

    python platform/lockfile.py extraneous LOCK   the installed distributions LOCK does not pin, one a line
    python platform/lockfile.py moved LOCK        those installed at another version than LOCK's (or not pinned):
                                                  name, locked version (or -), installed version, one a line

Run it with the Python of the environment in question (platform/install.sh runs it with .venv's,
platform/upgrade_check.py with its scratch environment's). A lock file is what `uv pip compile --generate-hashes`
writes (platform/lock.sh): `name==version`, an optional `; marker`, its `--hash=sha256:...` lines, and comments. A
package may be pinned twice, at two versions under two markers: either version is the locked one (markers are not
evaluated here, so this runs with no package beyond the standard library). The project itself, installed editable
and pinned nowhere, is neither extraneous nor moved.
"""

from __future__ import annotations

import re
import sys
import tomllib
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PIN = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[^\s;\\]+)\s*(?:;(?P<marker>[^\\]*))?")
HASH = re.compile(r"--hash=sha256:(?P<digest>[0-9a-f]{64})")


@dataclass(frozen=True)
class Pin:
    name: str  # canonical (PEP 503): lower case, runs of -_. as one -
    version: str
    marker: str | None
    hashes: tuple[str, ...]


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(path: Path) -> list[Pin]:
    """The pins of the lock file at `path`, each with the hashes that follow it."""
    found: list[Pin] = []
    for line in path.read_text().splitlines():
        if match := PIN.match(line):
            marker = (match["marker"] or "").strip() or None
            found.append(Pin(canonical(match["name"]), match["version"], marker, ()))
        elif (hashed := HASH.search(line)) and found:
            last = found[-1]
            found[-1] = Pin(last.name, last.version, last.marker, (*last.hashes, hashed["digest"]))
    return found


def project_name() -> str:
    with (ROOT / "pyproject.toml").open("rb") as file:
        return canonical(tomllib.load(file)["project"]["name"])


def installed() -> dict[str, str]:
    """Canonical name -> version of every distribution this Python sees, but the project itself."""
    own = project_name()
    found = {canonical(d.metadata["Name"]): d.version for d in metadata.distributions()}
    found.pop(own, None)
    return found


def extraneous(lock: Path) -> list[str]:
    pinned = {pin.name for pin in pins(lock)}
    return sorted(name for name in installed() if name not in pinned)


def moved(lock: Path) -> list[tuple[str, str, str]]:
    locked: dict[str, list[str]] = {}
    for pin in pins(lock):
        locked.setdefault(pin.name, []).append(pin.version)
    return sorted(
        (name, " or ".join(locked.get(name, ["-"])), version)
        for name, version in installed().items()
        if version not in locked.get(name, [])
    )


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("extraneous", "moved"):  # noqa: PLR2004
        print(__doc__, file=sys.stderr)
        return 2
    command, lock = argv[0], Path(argv[1])
    if command == "extraneous":
        for name in extraneous(lock):
            print(name)
    else:
        for name, was, now in moved(lock):
            print(name, was, now)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
