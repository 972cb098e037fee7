"""PySpark jobs over the delivery log. No Django here: a job runs wherever Spark runs, and its results are
written to Postgres by the caller (analytics/tasks.py)."""
