"""Django core settings shared by every environment."""

from __future__ import annotations

import importlib.util
import ipaddress
from datetime import timedelta
from pathlib import Path

import django_stubs_ext
from django.core.exceptions import ImproperlyConfigured

from config.env import BASE_DIR, database_from_url, envbool, envchoice, envint, envlist, envstr
from config.logs import logging_config

# Lets admin.ModelAdmin[Route] and the like (typed generics) work at run time.
django_stubs_ext.monkeypatch()

# Off, and no SECRET_KEY at all: local.py and test.py turn debug on and set a development key, production.py
# insists on a real key. A settings module that forgets either fails closed.
DEBUG = False
ALLOWED_HOSTS = envlist("DJANGO_ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]"])

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "rest_framework",
    "rest_framework.authtoken",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_celery_beat",
    "axes",
    "bindings",
    "streams",
    "analytics",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "bindings.middleware.api_body_limit",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Last: turns a sign-in refused for too many failures into the lockout page.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "config.urls"
ASGI_APPLICATION = "config.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASES = {"default": database_from_url("DATABASE_URL", envstr("DATABASE_URL"))}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# Checked wherever a person chooses a password (the admin's forms, `createsuperuser`, `demo_setup`).
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator", "OPTIONS": {"min_length": 12}},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

# Sign-in throttling (django-axes): after AXES_FAILURE_LIMIT failed sign-ins for one username from one address,
# that pair is refused for the cool-off, even with the right password (429, templates/admin/lockout.html). The lock
# is visible and removable in the admin (Axes > Access attempts). API tokens never go through authenticate(),
# so the API is not throttled. AxesStandaloneBackend comes first: it checks the lock before any password.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = envint("LOGIN_FAILURE_LIMIT", 5, minimum=1)
AXES_COOLOFF_TIME = timedelta(minutes=envint("LOGIN_LOCKOUT_MINUTES", 15, minimum=1))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_TEMPLATE = "admin/lockout.html"
# The address is counted as every per-address limit counts it: an IPv6 one by its prefix (SSE_CLIENT_IPV6_PREFIX).
AXES_CLIENT_IP_CALLABLE = "streams.server.addresses.lockout_address"

# The addresses (or networks, `10.0.0.0/8`) of the proxies in front whose forwarded headers count: only from one
# of them, and only on the plain port, does daphne's --proxy-headers choose the client address the limits and the
# sign-in lockout key on (streams/server/forwarded.py). Empty: none. From anyone else the headers are dropped.
TRUSTED_PROXIES = tuple(envlist("TRUSTED_PROXIES", ["127.0.0.1"]))
for _proxy in TRUSTED_PROXIES:
    try:
        ipaddress.ip_network(_proxy, strict=False)
    except ValueError:
        raise ImproperlyConfigured(f"TRUSTED_PROXIES: {_proxy!r} is not an IP address or network.") from None

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "var" / "static"


def _plotly_js_directory() -> Path:
    """Where the installed plotly package keeps plotly.min.js (found without importing plotly)."""
    spec = importlib.util.find_spec("plotly")
    if spec is None or not spec.submodule_search_locations:
        raise ImproperlyConfigured("The plotly package is not installed: run `make install`.")
    return Path(next(iter(spec.submodule_search_locations))) / "package_data"


# The analytics dashboards' charts: plotly.js as the plotly package ships it, served as /static/plotly/.
STATICFILES_DIRS = [("plotly", _plotly_js_directory())]
# daphne serves no static files itself; outside production the ASGI app serves them (config/asgi.py).
SERVE_STATIC = envbool("SERVE_STATIC", default=True)

REST_FRAMEWORK = {
    # Token first: its `WWW-Authenticate: Token` challenge makes DRF answer anonymous requests 401, not 403.
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["bindings.api.permissions.HasModelPermissions"],
    "DEFAULT_PAGINATION_CLASS": "bindings.api.query_filters.ApiPagination",
    "PAGE_SIZE": 100,
    "DEFAULT_FILTER_BACKENDS": ["bindings.api.query_filters.ApiFilterBackend"],
    # Routes nest lists and objects that forms cannot carry: the API reads JSON only (415 otherwise).
    "DEFAULT_PARSER_CLASSES": ["bindings.api.parsers.JSONParser"],
    "EXCEPTION_HANDLER": "bindings.api.problems.exception_handler",
    "DEFAULT_SCHEMA_CLASS": "bindings.api.openapi.AutoSchema",
}

SPECTACULAR_SETTINGS = {
    "TITLE": "SSE Kafka platform API",
    "DESCRIPTION": (
        "The control plane: endpoints, routes (paths, Kafka topic, filters, guarded roles) and JWT guards, "
        "keyed by name; PUT by name creates or replaces. Authenticate with `Authorization: Token <key>` "
        "(`manage.py api_token`) or an admin session; each request needs the Django model permissions of what it "
        "touches (view_, add_, change_, delete_), a 403 names the missing ones. Errors are RFC 9457 problem bodies."
    ),
    "VERSION": "1",
    "SCHEMA_PATH_PREFIX": "/api/v1/",
    "COMPONENT_SPLIT_REQUEST": True,
    "SERVE_INCLUDE_SCHEMA": False,
    # Swagger UI from the drf-spectacular-sidecar wheel, served as static files: nothing from a CDN.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "bindings.api.openapi.mark_response_fields_required",
        "bindings.api.openapi.close_request_bodies",
        "bindings.api.openapi.add_problem_responses",
    ],
}

# Logs go to stderr, one line per record: LOG_FORMAT=plain, or json for a log pipeline (config/logs.py).
LOG_FORMAT = envchoice("LOG_FORMAT", ("plain", "json"), default="plain")
LOGGING = logging_config(envstr("LOG_LEVEL", default="INFO"), LOG_FORMAT)
