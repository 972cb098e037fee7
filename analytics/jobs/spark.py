"""One SparkSession per process, started on first use and kept warm: a JVM start costs 5-10 s, a job on a warm
session well under one."""

from __future__ import annotations

import logging
import os
import sys
import threading

from pyspark.sql import SparkSession

from analytics.jobs.jars import jars

# py4j logs each connection it closes at INFO, some of them from finalizers at interpreter exit.
logging.getLogger("py4j").setLevel(logging.WARNING)

# The driver's heap when this process starts Spark's JVM (`SPARK_DRIVER_MEMORY`, Spark's own name for it). On
# `local[*]` the job's tasks run in it too, and the worker keeps the JVM for every run: a day of 10 M delivery rows
# rolls up in Spark's default of 1 GiB, but a session that went on to more passes has run out of it (a heap is
# taken from the machine only as it fills).
DRIVER_MEMORY = "2g"

_lock = threading.Lock()
_session: SparkSession | None = None
_master: str | None = None


def spark_session(master: str) -> SparkSession:
    """The process's session on `master` (`local[*]`, `local[2]`, `spark://host:7077`); a different master
    stops the old session first."""
    global _session, _master  # noqa: PLW0603  (the one warm session of this process)
    with _lock:
        if _session is not None and _master == master and _alive(_session):
            return _session
        if _session is not None:
            _session.stop()
        # Executors run this interpreter too (a standalone worker would otherwise pick `python3`).
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
        builder = (
            SparkSession.builder.master(master)
            .appName("sse-analytics")
            .config("spark.ui.enabled", "false")
            .config("spark.sql.session.timeZone", "UTC")
            .config("spark.sql.shuffle.partitions", "8")
            .config("spark.driver.memory", os.environ.get("SPARK_DRIVER_MEMORY") or DRIVER_MEMORY)
            # The Kafka source and Avro functions, as local files (platform/install.sh fetched them): the driver
            # serves them to a cluster's executors, and nothing is resolved from a repository at run time.
            .config("spark.jars", ",".join(jars()))
        )
        if master.startswith("local"):
            # Everything in this process: keep the block manager on loopback, where it also listens (the host's
            # name may resolve to an address nothing binds, and shuffles then fail to fetch their blocks).
            builder = builder.config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
        _session = builder.getOrCreate()
        _session.sparkContext.setLogLevel("WARN")
        _master = master
        return _session


def stop_session() -> None:
    global _session, _master
    with _lock:
        if _session is not None:
            _session.stop()
        _session, _master = None, None


def _alive(session: SparkSession) -> bool:
    context = session.sparkContext
    return context._jsc is not None and not context._jsc.sc().isStopped()
