"""Settings for a deployment: every secret and URL comes from the environment, nothing embedded."""

from __future__ import annotations

from config.env import envbool, envint, envlist, envsecret
from config.settings.base import *  # noqa: F403
from config.settings.services import *  # noqa: F403
from config.settings.streams import *  # noqa: F403

# Always off, whatever DJANGO_DEBUG says: debug pages show settings and code to anyone.
DEBUG = False
SECRET_KEY = envsecret("DJANGO_SECRET_KEY")
SERVE_STATIC = envbool("SERVE_STATIC", default=False)
SESSION_COOKIE_SECURE = envbool("SECURE_COOKIES", default=True)
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
# Origins (scheme and host) allowed to POST forms to the admin, e.g. https://sse.example.com: needed when the
# browser's origin is not the host Django sees (a proxy rewriting Host, another port).
CSRF_TRUSTED_ORIGINS = envlist("DJANGO_CSRF_TRUSTED_ORIGINS", [])

# Transport. TLS is usually terminated by a proxy or load balancer in front: Django then sees plain HTTP and
# knows the original scheme only from the proxy's X-Forwarded-Proto, which it may trust only when the operator
# says the proxy always sets it (otherwise any client could claim https).
if envbool("TRUST_X_FORWARDED_PROTO", default=False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
# Off by default: with TLS at the proxy, redirecting is the proxy's job, and without the header above Django
# would redirect every request, forever. Streams, /healthz and /readyz are answered before Django and are
# never redirected (a load balancer's probes stay plain HTTP).
SECURE_SSL_REDIRECT = envbool("SECURE_SSL_REDIRECT", default=False)
# Browsers remember to use https only for this host; sub-domains and the preload list are the operator's call,
# as they are hard to undo.
SECURE_HSTS_SECONDS = envint("SECURE_HSTS_SECONDS", 31_536_000, minimum=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = envbool("SECURE_HSTS_INCLUDE_SUBDOMAINS", default=False)
SECURE_HSTS_PRELOAD = envbool("SECURE_HSTS_PRELOAD", default=False)
SECURE_CONTENT_TYPE_NOSNIFF = True
