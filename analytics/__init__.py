"""Delivery analytics: log schema, PySpark jobs, Celery tasks, rollups and dashboards."""
