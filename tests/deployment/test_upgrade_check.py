"""platform/upgrade_check.py drops pyproject.toml's upper bounds and nothing else, and reads every line it declares."""

from __future__ import annotations

import sys

import pytest

from tests.conftest import ROOT

if str(ROOT / "platform") not in sys.path:  # platform/ is no package: its modules are reached by file name
    sys.path.append(str(ROOT / "platform"))
import upgrade_check


@pytest.mark.parametrize(
    ("declared", "unbounded"),
    [
        ("Django>=5.2.8,<5.3", "Django>=5.2.8"),
        ("Twisted[http2,tls]>=26.10,<27", "Twisted[http2,tls]>=26.10"),
        ("types-django-filter>=25.1, <=26.1", "types-django-filter>=25.1"),
        ("pyarrow>=18", "pyarrow>=18"),
        ("honcho", "honcho"),
        ("asyncapi3~=0.0.2", "asyncapi3>=0.0.2"),
        ("uv==0.13.*", "uv>=0.13"),
        ("redis>5,!=6.0.1,<9", "redis>5,!=6.0.1"),
        ('tomli>=2,<3; python_version < "3.11"', 'tomli>=2; python_version < "3.11"'),
    ],
)
def test_it_drops_the_upper_bounds_and_keeps_floors_exclusions_extras_and_markers(declared, unbounded) -> None:
    assert upgrade_check.without_upper_bounds(declared) == unbounded


def test_it_reads_every_requirement_pyproject_declares() -> None:
    lines = upgrade_check.declared()
    assert any(line.startswith("Django") for line in lines)
    assert any(line.startswith("pytest") for line in lines), "the dev extra too"
    for line in lines:
        assert "<" not in upgrade_check.without_upper_bounds(line)


def test_it_refuses_what_it_cannot_read() -> None:
    with pytest.raises(ValueError, match="not a version specifier"):
        upgrade_check.without_upper_bounds("django>=5 or so")
