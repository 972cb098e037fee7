"""Settings for the test suite: the same real services, fast password hashing."""

from __future__ import annotations

from config.env import DEVELOPMENT_SECRET_KEY, envbool, envstr
from config.settings.base import *  # noqa: F403
from config.settings.services import *  # noqa: F403
from config.settings.streams import *  # noqa: F403

DEBUG = envbool("DJANGO_DEBUG", default=False)
SECRET_KEY = envstr("DJANGO_SECRET_KEY", default=DEVELOPMENT_SECRET_KEY)

# A shorter gap between the route-table reads that unknown paths cause, so tests of new routes wait less.
SSE_UNKNOWN_PATH_RELOAD_MS = 100

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

# Separate test databases for runs side by side on one Postgres (TEST_DB_SUFFIX=_b pytest ...).
DATABASES["default"]["TEST"] = {"NAME": f"test_{DATABASES['default']['NAME']}{envstr('TEST_DB_SUFFIX', default='')}"}  # noqa: F405

# The suite's stand-in identity providers serve their keys over http on 127.0.0.1.
SSE_JWKS_ALLOW_HTTP = True

# The suite's servers log deliveries apart from what `make run` rolls up into the development database (tests that
# roll up give each server a topic of their own).
DELIVERY_LOG_TOPIC = envstr("DELIVERY_LOG_TOPIC", default="sse-delivery-log-test")
SSE_INTERNAL_TOPICS = (*SSE_INTERNAL_TOPICS, DELIVERY_LOG_TOPIC)  # noqa: F405
