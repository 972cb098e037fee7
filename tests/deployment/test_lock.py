"""The lock files pin, with hashes, what pyproject.toml declares, and this environment holds what they pin.

requirements-dev.lock (what platform/install.sh puts in .venv) and requirements.lock (what docker/Dockerfile
installs) are written by platform/lock.sh (`make lock`). A dependency added to or changed in pyproject.toml
without writing them again fails here, naming it; so does a .venv installed from another lock.
"""

from __future__ import annotations

import sys
import tomllib

import pytest
from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.version import Version

from tests.conftest import ROOT
from tests.deployment.test_dependency_floors import project

if str(ROOT / "platform") not in sys.path:  # platform/ is no package: its modules are reached by file name
    sys.path.append(str(ROOT / "platform"))
import lockfile

DEV_LOCK = ROOT / "requirements-dev.lock"
RUNTIME_LOCK = ROOT / "requirements.lock"


def requirements(*groups: str) -> list[Requirement]:
    """pyproject.toml's requirements in `groups` ("dependencies" or an extra's name), and pip and the build backend,
    which both lock files pin for the project's own install."""
    table = project()
    lines = ["pip", *tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]["requires"]]
    for group in groups:
        lines.extend(table["dependencies"] if group == "dependencies" else table["optional-dependencies"][group])
    return [Requirement(line) for line in lines]


def here(pins: list[lockfile.Pin]) -> dict[str, lockfile.Pin]:
    """The pins this environment installs (no marker, or one that holds here), by name."""
    return {pin.name: pin for pin in pins if pin.marker is None or Marker(pin.marker).evaluate()}


@pytest.mark.parametrize(
    ("lock", "groups"), [(DEV_LOCK, ("dependencies", "dev")), (RUNTIME_LOCK, ("dependencies",))], ids=["dev", "image"]
)
def test_it_pins_every_declared_requirement_within_its_bounds(lock, groups) -> None:
    pinned = here(lockfile.pins(lock))
    for requirement in requirements(*groups):
        pin = pinned.get(lockfile.canonical(requirement.name))
        assert pin is not None, f"{lock.name} pins no {requirement.name}: run `make lock`"
        assert requirement.specifier.contains(Version(pin.version), prereleases=True), (
            f"{lock.name} pins {pin.name} {pin.version}, pyproject.toml wants {requirement}: run `make lock`"
        )


@pytest.mark.parametrize("lock", [DEV_LOCK, RUNTIME_LOCK], ids=["dev", "image"])
def test_it_pins_every_package_with_the_hashes_of_its_files(lock) -> None:
    pins = lockfile.pins(lock)
    assert len(pins) > 50, f"{lock.name} holds {len(pins)} pins: not a lock file of this project"
    for pin in pins:
        assert pin.hashes, f"{lock.name}: {pin.name}=={pin.version} has no --hash"


def test_the_image_runs_the_versions_the_tests_run() -> None:
    dev = {(pin.name, pin.version) for pin in lockfile.pins(DEV_LOCK)}
    differ = [f"{pin.name}=={pin.version}" for pin in lockfile.pins(RUNTIME_LOCK) if (pin.name, pin.version) not in dev]
    assert not differ, f"requirements.lock pins what requirements-dev.lock does not: {differ}; run `make lock`"


def test_this_environment_holds_what_the_dev_lock_pins() -> None:
    assert lockfile.moved(DEV_LOCK) == [], "installed at other versions than locked (name, locked, installed)"
    assert lockfile.extraneous(DEV_LOCK) == [], "installed but not locked"


def test_it_reads_a_pin_its_marker_and_its_hashes(tmp_path) -> None:
    lock = tmp_path / "example.lock"
    lock.write_text(
        "# a comment\n"
        "Zope.Interface==8.0 ; sys_platform != 'win32' \\\n"
        "    --hash=sha256:" + "a" * 64 + " \\\n"
        "    --hash=sha256:" + "b" * 64 + "\n"
        "    # via twisted\n"
        "h2==4.4.1 \\\n"
        "    --hash=sha256:" + "c" * 64 + "\n"
    )
    assert lockfile.pins(lock) == [
        lockfile.Pin("zope-interface", "8.0", "sys_platform != 'win32'", ("a" * 64, "b" * 64)),
        lockfile.Pin("h2", "4.4.1", None, ("c" * 64,)),
    ]
