"""Where platform/install.sh puts Spark's Kafka source and Avro functions (platform/spark/pom.xml), and the list of
jars a SparkSession is given: local files, never resolved when a job runs.

`python -m analytics.jobs.jars` prints the directory (install.sh copies the jars there). Its name comes from
config/jar_cache.py, as Kafka's and the registry's do, so this module loads the project package: it serves the
driver (jobs/spark.py), and the jobs that run on Spark's executors never import it.
"""

from __future__ import annotations

import os
from pathlib import Path

from config.jar_cache import pom_dir

POM = Path(__file__).resolve().parents[2] / "platform" / "spark" / "pom.xml"


class JarsMissing(RuntimeError):
    pass


def jar_dir() -> Path:
    """`SPARK_KAFKA_JARS_DIR` when set (the image copies them there), else a cache outside the checkout named
    after the pom's hash, so a changed pom gets a fresh copy."""
    if os.environ.get("SPARK_KAFKA_JARS_DIR"):
        return Path(os.environ["SPARK_KAFKA_JARS_DIR"])
    return pom_dir("spark", POM)


def jars() -> list[str]:
    """The jars' paths; a clear error when install.sh has not fetched them."""
    folder = jar_dir()
    if not (folder / ".complete").exists():
        raise JarsMissing(f"Spark's Kafka jars are not in {folder}: run platform/install.sh")
    return sorted(str(path) for path in folder.glob("*.jar"))


if __name__ == "__main__":
    print(jar_dir())
