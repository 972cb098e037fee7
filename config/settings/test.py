"""Settings for the test suite: the same real services, fast password hashing."""

from __future__ import annotations

from config.settings.base import *  # noqa: F403
from config.settings.services import *  # noqa: F403
from config.settings.streams import *  # noqa: F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
SSE_KEEPALIVE_S = 1
