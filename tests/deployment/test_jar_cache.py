"""The jar cache (config/jar_cache.py): one directory per pom, named after the pom's hash, under the user's cache;
and the directories install.sh is told to fill are the ones Kafka, the registry and Spark read."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from config.jar_cache import cache_root, pom_dir
from tests.conftest import ROOT


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    return tmp_path / "xdg" / "sse-kafka-platform"


def write_pom(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_the_same_pom_gives_the_same_directory(cache: Path, tmp_path: Path) -> None:
    pom = write_pom(tmp_path / "pom.xml", "<project/>\n")
    twin = write_pom(tmp_path / "twin.xml", "<project/>\n")

    assert pom_dir("kafka", pom) == pom_dir("kafka", pom) == pom_dir("kafka", twin)


def test_a_changed_pom_gives_another_directory(cache: Path, tmp_path: Path) -> None:
    pom = write_pom(tmp_path / "pom.xml", "<project/>\n")
    before = pom_dir("kafka", pom)
    write_pom(pom, "<project><version>2</version></project>\n")

    assert pom_dir("kafka", pom) != before
    assert pom_dir("kafka", pom).parent == before.parent == cache


def test_the_name_is_the_caches_and_the_start_of_the_poms_sha256(cache: Path, tmp_path: Path) -> None:
    # Caches filled already must keep working: the names are pinned, not recomputed here.
    pom = write_pom(tmp_path / "pom.xml", "<project/>\n")

    assert pom_dir("spark", pom) == cache / "spark-23c641491ed3afc9"
    assert pom_dir("registry", pom) == cache / "registry-23c641491ed3afc9"


def test_the_cache_is_under_home_when_xdg_cache_home_is_unset_or_empty(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    assert cache_root() == tmp_path / "home" / ".cache" / "sse-kafka-platform"

    monkeypatch.setenv("XDG_CACHE_HOME", "")
    assert cache_root() == tmp_path / "home" / ".cache" / "sse-kafka-platform"


def printed(args: list[str], **env: str) -> Path:
    """What one of install.sh's `<script> jar-dir` commands prints, run against this checkout's code."""
    environ = {key: value for key, value in os.environ.items() if key != "SPARK_KAFKA_JARS_DIR"}
    environ.update(PYTHONPATH=str(ROOT), **env)
    result = subprocess.run(
        [sys.executable, *args], cwd=ROOT, env=environ, capture_output=True, text=True, check=False, timeout=60
    )
    assert result.returncode == 0, result.stderr
    return Path(result.stdout.strip())


def test_install_sh_fills_the_directories_the_services_read(cache: Path) -> None:
    kafka = printed(["platform/embedded_kafka.py", "jar-dir"])
    registry = printed(["platform/embedded_registry.py", "app-dir"])
    spark = printed(["-m", "analytics.jobs.jars"])

    assert kafka == pom_dir("kafka", ROOT / "platform" / "kafka" / "pom.xml")
    assert registry == pom_dir("registry", ROOT / "platform" / "registry" / "pom.xml")
    assert spark == pom_dir("spark", ROOT / "platform" / "spark" / "pom.xml")
    assert kafka.parent == registry.parent == spark.parent == cache


def test_spark_kafka_jars_dir_names_sparks_jars_instead(cache: Path, tmp_path: Path) -> None:
    assert printed(["-m", "analytics.jobs.jars"], SPARK_KAFKA_JARS_DIR=str(tmp_path / "jars")) == tmp_path / "jars"
