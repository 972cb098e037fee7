"""`platform/` is a plain folder: the standard library's `platform` module must stay importable."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import ROOT

PROBE = """
import os, sysconfig
os.environ["DJANGO_SETTINGS_MODULE"] = "config.settings.test"
import django
django.setup()
import platform, uuid
assert platform.__file__.startswith(sysconfig.get_paths()["stdlib"]), platform.__file__
print(platform.system())
"""


def test_the_stdlib_platform_module_works_under_the_project_settings() -> None:
    assert not (ROOT / "platform" / "__init__.py").exists()
    result = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "Linux"
