"""ASGI entry point for daphne: stream paths go to the SSE endpoint, the rest to Django."""

from __future__ import annotations

import os

from django.core.asgi import get_asgi_application

# Production unless told otherwise: `make run` and the tests choose their settings explicitly.
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.production")
django_app = get_asgi_application()

# Imported after Django is set up: these modules use models and settings.
from django.conf import settings  # noqa: E402
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler  # noqa: E402

from streams.edge.endpoint import StreamEndpoint  # noqa: E402

http_app = ASGIStaticFilesHandler(django_app) if settings.SERVE_STATIC else django_app
# The endpoint itself, not behind channels' `ProtocolTypeRouter`: a router's coroutine was one more frame held by
# every open stream. What is not HTTP goes on to Django, which refuses it as the router did (a ValueError).
application = StreamEndpoint(http_app)
