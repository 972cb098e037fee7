"""The production settings fail closed: no start without a real secret key, never debug.

Each case imports the settings in a fresh interpreter, as a deployment's process would, since settings are
read once per process.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from django.conf import settings

from config.env import DEVELOPMENT_SECRET_KEY
from tests.support.servers import HOST, ROOT, start_daphne

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


def test_the_deploy_check_leaves_only_the_operators_choices() -> None:
    """With the defaults, only what depends on the deployment is left: a redirect (often the proxy's job) and
    HSTS for sub-domains and preloading (hard to undo). Once the operator opts in, nothing is left."""
    check = [sys.executable, "manage.py", "check", "--deploy"]
    defaults = run(check, production_env(DJANGO_SECRET_KEY=GOOD_KEY))
    assert defaults.returncode == 0, defaults.stderr
    assert set(re.findall(r"\((\w+\.\w+)\)", defaults.stderr)) == {"security.W005", "security.W008", "security.W021"}
    opted_in = run(
        check,
        production_env(
            DJANGO_SECRET_KEY=GOOD_KEY,
            SECURE_SSL_REDIRECT="1",
            SECURE_HSTS_INCLUDE_SUBDOMAINS="1",
            SECURE_HSTS_PRELOAD="1",
        ),
    )
    assert opted_in.returncode == 0, opted_in.stderr
    assert "System check identified no issues" in opted_in.stdout, (opted_in.stdout, opted_in.stderr)


@pytest.mark.django_db
def test_https_redirects_django_pages_but_never_streams_or_probes(tmp_path: Path) -> None:
    server = start_daphne(
        {
            "DJANGO_SETTINGS_MODULE": "config.settings.production",
            "DJANGO_SECRET_KEY": GOOD_KEY,
            "SECURE_SSL_REDIRECT": "1",
            "TRUST_X_FORWARDED_PROTO": "1",
            "DELIVERY_LOG_TOPIC": "sse-delivery-log-test",  # not the production default, on the tests' broker
        },
        log_name="test-daphne-production",
    )
    try:
        plain = httpx.get(f"{server.url}/admin/login/")
        assert plain.status_code == 301
        assert plain.headers["location"] == f"https://{HOST}:{server.port}/admin/login/"
        proxied = httpx.get(f"{server.url}/admin/login/", headers={"x-forwarded-proto": "https"})
        assert proxied.status_code == 200
        assert proxied.headers["strict-transport-security"] == "max-age=31536000"
        assert proxied.headers["x-content-type-options"] == "nosniff"
        assert httpx.get(f"{server.url}/healthz").status_code == 200
        stream = httpx.get(f"{server.url}/no-route-here", headers={"accept": "text/event-stream"})
        assert stream.status_code == 404, "the stream path is answered by the stream endpoint, not redirected"
        assert stream.headers["content-type"] == "application/problem+json"
    finally:
        server.stop()
