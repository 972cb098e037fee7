"""Settings for `make run` and development: the embedded services, debug on."""

from __future__ import annotations

from config.env import DEVELOPMENT_SECRET_KEY, envbool, envstr
from config.settings.base import *  # noqa: F403
from config.settings.services import *  # noqa: F403
from config.settings.streams import *  # noqa: F403

DEBUG = envbool("DJANGO_DEBUG", default=True)
SECRET_KEY = envstr("DJANGO_SECRET_KEY", default=DEVELOPMENT_SECRET_KEY)
