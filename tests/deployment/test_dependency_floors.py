"""The installed packages meet the floors pyproject.toml declares, and the floors keep the known fixes.

The floors are read from pyproject.toml itself and compared with what `importlib.metadata` reports, so neither
side can drift: an environment built before a floor was raised (a stale virtualenv, a pinned image) fails here
instead of running a release with a known hole.
"""

from __future__ import annotations

import tomllib
from importlib import metadata
from typing import Any

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

from tests.conftest import ROOT

# Releases below these carry a hole the platform is exposed to: Twisted before 26.10 has no HTTP/2 rapid-reset
# limiter (and, before 24.7, the pipelining fix of CVE-2024-41671); Django before 5.2.8 has CVE-2025-64459.
SECURITY_FLOORS = {"twisted": Version("26.10"), "django": Version("5.2.8")}


def project() -> dict[str, Any]:
    """pyproject.toml's [project] table."""
    table = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert isinstance(table, dict)
    return table


def declared() -> list[Requirement]:
    table = project()
    lines = list(table["dependencies"])
    for extra in table.get("optional-dependencies", {}).values():
        lines.extend(extra)
    return [Requirement(line) for line in lines]


def floor(requirement: Requirement) -> Version | None:
    """The lowest version `requirement` admits (its `>=` or `==` bound), or None without one."""
    bounds = [Version(spec.version) for spec in requirement.specifier if spec.operator in (">=", "==", "~=")]
    return max(bounds) if bounds else None


def test_the_floors_keep_the_security_fixes() -> None:
    floors = {requirement.name.lower(): floor(requirement) for requirement in declared()}
    for name, needed in SECURITY_FLOORS.items():
        lowest = floors.get(name)
        assert lowest is not None, f"pyproject.toml declares no floor for {name}"
        assert lowest >= needed, f"pyproject.toml admits {name} {lowest}, below {needed}"


@pytest.mark.parametrize("requirement", [r for r in declared() if floor(r) is not None], ids=str)
def test_the_installed_version_meets_its_floor(requirement: Requirement) -> None:
    lowest = floor(requirement)
    assert lowest is not None
    installed = Version(metadata.version(requirement.name))
    assert installed >= lowest, f"{requirement.name} {installed} is installed, pyproject.toml needs {requirement}"
