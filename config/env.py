"""Typed readers for settings that come from the environment.

Each reader fails loudly with the variable's name and what was wrong, so a bad value stops the process at
start-up instead of surfacing as a confusing error later. Unset variables fall back to the default, then
to ``var/services.env`` (written by ``platform/services.py`` for the embedded services).
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import unquote, urlsplit

from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent
# platform/embedded.py keeps the embedded services' state in the same directory.
SERVICES_ENV = Path(os.environ.get("SSE_VAR_DIR") or BASE_DIR / "var") / "services.env"

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def read_env_file(path: Path = SERVICES_ENV) -> dict[str, str]:
    """The ``KEY=value`` lines of an env file (``var/services.env`` by default); empty if there is none."""
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return {}
    pairs = (line.split("=", 1) for line in lines if "=" in line and not line.startswith("#"))
    return {key.strip(): value.strip() for key, value in pairs}


def _raw(name: str) -> str | None:
    value = os.environ.get(name)
    if value is None:
        value = read_env_file().get(name)
    return value


def envstr(name: str, default: str | None = None) -> str:
    value = _raw(name)
    if value is None or value == "":
        if default is None:
            raise ImproperlyConfigured(
                f"{name} is not set. Set it, or start the embedded services with `make run` / `make test`."
            )
        return default
    return value


def envbool(name: str, default: bool) -> bool:
    value = _raw(name)
    if value is None:
        return default
    lowered = value.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name}={value!r} is not a boolean (use one of 1/0, true/false, yes/no, on/off).")


def envint(name: str, default: int, *, minimum: int | None = None, maximum: int | None = None) -> int:
    value = _raw(name)
    if value is None or value.strip() == "":
        return default
    try:
        number = int(value.strip())
    except ValueError:
        raise ImproperlyConfigured(f"{name}={value!r} is not an integer.") from None
    if minimum is not None and number < minimum:
        raise ImproperlyConfigured(f"{name}={number} is below the minimum of {minimum}.")
    if maximum is not None and number > maximum:
        raise ImproperlyConfigured(f"{name}={number} is above the maximum of {maximum}.")
    return number


def envchoice(name: str, choices: tuple[str, ...], default: str) -> str:
    value = envstr(name, default).strip().lower()
    if value not in choices:
        raise ImproperlyConfigured(f"{name}={value!r} is not one of {', '.join(choices)}.")
    return value


def envlist(name: str, default: list[str]) -> list[str]:
    value = _raw(name)
    if value is None:
        return list(default)
    return [item.strip() for item in value.split(",") if item.strip()]


def database_from_url(name: str, url: str) -> dict[str, object]:
    """Django ``DATABASES`` entry from ``postgres://user:password@host:port/dbname``."""
    parts = urlsplit(url)
    if parts.scheme not in {"postgres", "postgresql"}:
        raise ImproperlyConfigured(f"{name}={url!r}: only postgres:// URLs are supported.")
    dbname = unquote(parts.path.lstrip("/"))
    if not dbname:
        raise ImproperlyConfigured(f"{name}={url!r} names no database (postgres://user@host:port/DBNAME).")
    try:
        port = parts.port
    except ValueError:
        raise ImproperlyConfigured(f"{name}={url!r} has an invalid port.") from None
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": dbname,
        "USER": unquote(parts.username or ""),
        "PASSWORD": unquote(parts.password or ""),
        "HOST": parts.hostname or "",
        "PORT": str(port or ""),
        "CONN_MAX_AGE": 0,
        # An unreachable database is an error within seconds, not a request hanging on the kernel's timeout.
        "OPTIONS": {"connect_timeout": 3},
    }


# The key `make run` and the test suite sign with. Public, so production refuses it (`envsecret`).
DEVELOPMENT_SECRET_KEY = "insecure-development-key-change-me-in-production-000"  # noqa: S105
SECRET_KEY_MIN_LENGTH = 50
SECRET_KEY_MIN_UNIQUE = 5


def envsecret(name: str) -> str:
    """A signing key for production: set, not a known development key, at least 50 characters, not repetitive.

    The length and variety are what Django's deploy check asks of ``SECRET_KEY`` (security.W009).
    """
    advice = (
        "Generate one with `python -c 'import secrets; print(secrets.token_urlsafe(50))'`; for development, "
        "choose the local settings instead: DJANGO_SETTINGS_MODULE=config.settings.local."
    )
    value = _raw(name) or ""
    if not value:
        raise ImproperlyConfigured(f"{name} is not set: the production settings need a secret key. {advice}")
    if value == DEVELOPMENT_SECRET_KEY or value.startswith("django-insecure"):
        raise ImproperlyConfigured(f"{name} is a known, insecure development key. {advice}")
    if len(value) < SECRET_KEY_MIN_LENGTH or len(set(value)) < SECRET_KEY_MIN_UNIQUE:
        raise ImproperlyConfigured(
            f"{name} is too weak: it has {len(value)} characters, at least {SECRET_KEY_MIN_LENGTH} "
            f"varied ones are needed. {advice}"
        )
    return value


def redis_url(name: str, url: str) -> str:
    if urlsplit(url).scheme not in {"redis", "rediss", "unix"}:
        raise ImproperlyConfigured(f"{name}={url!r}: expected a redis://, rediss:// or unix:// URL.")
    return url
