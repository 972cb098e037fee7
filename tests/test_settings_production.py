"""The production settings fail closed: no start without a real secret key, never debug.

Each case imports the settings in a fresh interpreter, as a deployment's process would, since settings are
read once per process.
"""

from __future__ import annotations

import os
import subprocess
import sys

from django.conf import settings

from config.env import DEVELOPMENT_SECRET_KEY
from tests.servers import ROOT

GOOD_KEY = "k3y-" + "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMN"
PROBE = "from django.conf import settings; print('DEBUG', settings.DEBUG)"


def production_env(**overrides: str) -> dict[str, str]:
    env = {name: value for name, value in os.environ.items() if not name.startswith(("DJANGO_", "SECURE_"))}
    db = settings.DATABASES["default"]
    env.update(
        DJANGO_SETTINGS_MODULE="config.settings.production",
        DATABASE_URL=f"postgres://{db['USER']}:{db['PASSWORD']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
        REDIS_URL=settings.REDIS_URL,
        KAFKA_BOOTSTRAP_SERVERS=settings.KAFKA.bootstrap_servers,
    )
    env.update(overrides)
    return env


def run(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, check=False)


def test_it_refuses_to_start_without_a_secret_key() -> None:
    result = run([sys.executable, "-c", PROBE], production_env())
    assert result.returncode != 0
    assert "ImproperlyConfigured: DJANGO_SECRET_KEY is not set" in result.stderr


def test_it_refuses_the_old_development_key_and_django_insecure_keys() -> None:
    for key in (DEVELOPMENT_SECRET_KEY, "django-insecure-" + GOOD_KEY):
        result = run([sys.executable, "-c", PROBE], production_env(DJANGO_SECRET_KEY=key))
        assert result.returncode != 0, key
        assert "DJANGO_SECRET_KEY is a known, insecure development key" in result.stderr, key


def test_it_refuses_a_short_or_repetitive_key() -> None:
    for key in (GOOD_KEY[:49], "ab" * 30):
        result = run([sys.executable, "-c", PROBE], production_env(DJANGO_SECRET_KEY=key))
        assert result.returncode != 0, key
        assert "DJANGO_SECRET_KEY is too weak" in result.stderr, key


def test_a_good_key_starts_it_and_debug_stays_off_whatever_the_environment_says() -> None:
    result = run([sys.executable, "-c", PROBE], production_env(DJANGO_SECRET_KEY=GOOD_KEY, DJANGO_DEBUG="1"))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "DEBUG False"


def test_manage_py_chooses_production_unless_told_otherwise() -> None:
    env = production_env()
    del env["DJANGO_SETTINGS_MODULE"]
    refused = run([sys.executable, "manage.py", "check"], env)
    assert refused.returncode != 0
    assert "DJANGO_SECRET_KEY is not set" in refused.stderr
    local = run([sys.executable, "manage.py", "check"], {**env, "DJANGO_SETTINGS_MODULE": "config.settings.local"})
    assert local.returncode == 0, local.stderr
