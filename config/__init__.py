"""Django project package (settings, URLs, ASGI application, Celery app)."""

from config.celery_app import app as celery_app

__all__ = ["celery_app"]
