"""Settings for a deployment: every secret and URL comes from the environment, nothing embedded."""

from __future__ import annotations

from config.env import envbool, envsecret
from config.settings.base import *  # noqa: F403
from config.settings.services import *  # noqa: F403
from config.settings.streams import *  # noqa: F403

# Always off, whatever DJANGO_DEBUG says: debug pages show settings and code to anyone.
DEBUG = False
SECRET_KEY = envsecret("DJANGO_SECRET_KEY")
SERVE_STATIC = envbool("SERVE_STATIC", default=False)
SESSION_COOKIE_SECURE = envbool("SECURE_COOKIES", default=True)
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
