"""docker/Dockerfile and docker/compose.yaml, checked without a Docker engine (the machines have none).

The image must serve with platform/web.py (workers with write flow control) under the production settings, as a
user that is not root and cannot change the code, with platform/ in the image; compose must run the same commands
as platform/Procfile and platform/start.sh, start in order on health checks, and point its Spark worker at its
Spark master. The last tests run the image's command line here, with the image's environment, ask it for
/healthz, and run compose's web health check against it.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from django.conf import settings

from tests.conftest import wait_until
from tests.deployment.test_settings_production import GOOD_KEY, production_env, run
from tests.support.servers import HOST, ROOT, free_port, url_of_test_database

DOCKER = ROOT / "docker"


def instructions() -> list[tuple[str, str]]:
    """The Dockerfile as (INSTRUCTION, arguments), continuation lines joined, comments dropped."""
    logical: list[str] = []
    pending = ""
    for line in (DOCKER / "Dockerfile").read_text().splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        logical.append(pending + line)
        pending = ""
    return [(text.split(None, 1)[0].upper(), text.split(None, 1)[1].strip()) for text in logical]


def all_of(name: str) -> list[str]:
    return [arguments for instruction, arguments in instructions() if instruction == name]


def image_env() -> dict[str, str]:
    env: dict[str, str] = {}
    for arguments in all_of("ENV"):
        for pair in shlex.split(arguments):
            name, value = pair.split("=", 1)
            env[name] = value
    return env


def image_cmd() -> list[str]:
    command = json.loads(all_of("CMD")[-1])
    assert isinstance(command, list), "CMD in exec form, so SIGTERM reaches web.py and not a shell"
    return [str(part) for part in command]


def compose() -> dict[str, object]:
    document = yaml.safe_load((DOCKER / "compose.yaml").read_text())
    assert isinstance(document, dict)
    return document


def services() -> dict[str, dict[str, Any]]:
    found = compose()["services"]
    assert isinstance(found, dict)
    return found


PLATFORM_SERVICES = ("migrate", "web", "worker", "beat")  # Django's settings, the delivery log, the image's user
SPARK_SERVICES = ("spark-master", "spark-worker")


def procfile() -> dict[str, list[str]]:
    """platform/Procfile: each process's argv, with the virtualenv's bin/ dropped (the image has no .venv)."""
    found = {}
    for line in (ROOT / "platform" / "Procfile").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, command = line.split(":", 1)
            argv = shlex.split(command)
            found[name.strip()] = [argv[0].removeprefix(".venv/bin/"), *argv[1:]]
    return found


def web_health_check() -> list[str]:
    """The argv of compose's web health check, run with this interpreter."""
    test = services()["web"]["healthcheck"]["test"]
    assert test[:2] == ["CMD", "python"], "exec form, with the image's Python: the slim image has no curl"
    return [sys.executable, *test[2:]]


def run_health_check(port: int) -> int:
    env = {"PATH": os.environ.get("PATH", ""), **image_env(), "WEB_PORT": str(port)}
    return subprocess.run(web_health_check(), env=env, capture_output=True, timeout=30, check=False).returncode


def test_the_image_serves_with_web_py_under_the_production_settings() -> None:
    assert image_cmd() == ["python", "platform/web.py"]
    env = image_env()
    assert env["DJANGO_SETTINGS_MODULE"] == "config.settings.production"
    assert env["WEB_HOST"] == "0.0.0.0"
    assert env["WEB_PORT"] == all_of("EXPOSE")[-1]


def test_the_image_copies_what_web_py_and_its_workers_import() -> None:
    copied = {shlex.split(arguments)[0] for arguments in all_of("COPY")}
    assert {"platform", "config", "bindings", "streams", "analytics", "templates", "manage.py"} <= copied
    assert not any("--chown" in arguments for arguments in all_of("COPY")), "the code stays root's"


def test_the_image_installs_the_locked_packages_then_the_project_alone() -> None:
    installs = [run for run in all_of("RUN") if "pip install" in run]
    assert installs, "the image installs nothing with pip"
    locked, *rest = installs
    assert shlex.split(locked)[-3:] == ["--require-hashes", "-r", "requirements.lock"], "the locked packages first"
    assert "requirements.lock" in {shlex.split(arguments)[0] for arguments in all_of("COPY")}
    for project in rest:
        assert "--no-deps" in shlex.split(project), f"{project}: anything but the lock's packages comes unchecked"


def test_the_image_runs_as_a_user_of_its_own_who_may_write_only_var() -> None:
    users = all_of("USER")
    assert users, "no USER: the processes would run as root"
    user = users[-1]
    assert user.split(":")[0] not in {"root", "0"}
    runs = " && ".join(all_of("RUN"))
    created = [shlex.split(step)[-1] for step in runs.split("&&") if "useradd" in step]
    assert created == [user], "the user is made in the image with useradd"
    assert f"chown {user}:{user} /app/var" in runs
    steps = [instruction for instruction, _ in instructions()]
    assert steps.index("USER") > max(i for i, step in enumerate(steps) if step == "RUN"), "USER after every RUN"


def test_compose_runs_the_same_command_and_settings() -> None:
    document = compose()
    services = document["services"]
    assert isinstance(services, dict)
    assert services["web"]["command"] == image_cmd()
    for name, service in services.items():
        environment = service.get("environment", {})
        assert "DJANGO_SETTINGS_MODULE" not in environment, f"{name} must keep the image's production settings"
        assert "DELIVERY_LOG_DIR" not in environment, f"{name}: the delivery log is a Kafka topic, not a directory"
        assert "volumes" not in service or name in {"postgres", "kafka"}, f"{name} shares no directory"


def test_compose_runs_what_the_procfile_and_make_run_run() -> None:
    found = services()
    for name in ("web", "worker", "beat"):
        assert found[name]["command"] == procfile()[name], f"{name} runs what platform/Procfile runs"
    start = (ROOT / "platform" / "start.sh").read_text()
    migrate = shlex.split(next(line for line in start.splitlines() if "manage.py migrate" in line))
    # make run migrates quietly; compose keeps Django's default verbosity, so its logs say what was applied.
    assert found["migrate"]["command"] == ["python", *migrate[1 : migrate.index("-v")]]


def test_compose_starts_each_service_once_what_it_needs_is_healthy_or_done() -> None:
    found = services()
    for name in PLATFORM_SERVICES:
        assert found[name]["depends_on"]["postgres"] == {"condition": "service_healthy"}, name
    for name in ("web", "worker", "beat"):
        assert found[name]["depends_on"]["migrate"] == {"condition": "service_completed_successfully"}, name
        assert found[name]["depends_on"]["redis"] == {"condition": "service_healthy"}, name
    assert found["web"]["depends_on"]["kafka"] == {"condition": "service_healthy"}
    assert found["migrate"].get("restart", "no") == "no", "a one-off: restarting it would never complete"
    for name, service in found.items():
        for needed, how in service.get("depends_on", {}).items():
            if how["condition"] == "service_healthy":
                assert "healthcheck" in found[needed], f"{name} waits for {needed}, which has no health check"
    for name in ("postgres", "redis", "kafka", "web", "spark-master", "spark-worker"):
        assert found[name]["healthcheck"]["test"], f"{name} has a health check"


def test_the_web_health_check_asks_readyz_with_python() -> None:
    web = services()["web"]
    argv = web_health_check()
    assert "/readyz" in argv[-1]
    assert not {"curl", "wget"} & set(" ".join(argv).split())
    assert str(image_env()["WEB_PORT"]) == web["ports"][0].rsplit(":", 1)[1], "it asks the port web.py listens on"


def test_the_spark_worker_runs_the_wheels_launcher_and_points_at_the_master() -> None:
    found = services()
    master, worker = found["spark-master"]["command"], found["spark-worker"]["command"]
    assert master[:2] == ["spark-class", "org.apache.spark.deploy.master.Master"]
    assert worker[:2] == ["spark-class", "org.apache.spark.deploy.worker.Worker"]
    url = f"spark://spark-master:{master[master.index('--port') + 1]}"
    assert master[master.index("--host") + 1] == "spark-master"
    assert worker[-1] == url
    assert found["worker"]["environment"]["SPARK_MASTER"] == url, "the Celery worker's rollup drives that cluster"
    # spark-class comes with the pyspark wheel, installed beside the interpreter, as in the image.
    assert (Path(sys.executable).parent / "spark-class").is_file()
    # The executors read Kafka with the jars the image holds, where the Celery worker's driver looks for them.
    jars = image_env()["SPARK_KAFKA_JARS_DIR"]
    assert f"COPY --from=spark-jars /jars {jars}" in (ROOT / "docker" / "Dockerfile").read_text()
    work_dir = worker[worker.index("--work-dir") + 1]
    assert work_dir.startswith("/app/var/"), "the only place the image's user may write"


def test_every_service_of_the_image_runs_as_its_user() -> None:
    for name in (*PLATFORM_SERVICES, *SPARK_SERVICES):
        service = services()[name]
        assert service["build"]["dockerfile"] == "docker/Dockerfile", f"{name} runs the platform image"
        assert "user" not in service, f"{name} keeps the image's user ({all_of('USER')[-1]}), never root"


@contextlib.contextmanager
def answering(status: int) -> Iterator[int]:
    """A local HTTP server answering every GET with `status`; yields its port."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(status)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer((HOST, 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_the_web_health_check_fails_on_a_503_and_on_a_refused_connection() -> None:
    with answering(503) as port:
        assert run_health_check(port) != 0
    with answering(200) as port:
        assert run_health_check(port) == 0
    assert run_health_check(free_port()) != 0


@pytest.mark.django_db(transaction=True)
def test_the_image_command_line_starts_and_answers_healthz(tmp_path: Path) -> None:
    port = free_port()
    env = {
        "PATH": os.environ.get("PATH", ""),
        **image_env(),
        "WEB_HOST": HOST,
        "WEB_PORT": str(port),
        "WEB_PROCESSES": "1",
        "DJANGO_SECRET_KEY": GOOD_KEY,
        "DATABASE_URL": url_of_test_database(),
        "REDIS_URL": settings.REDIS_URL,
        "KAFKA_BOOTSTRAP_SERVERS": settings.KAFKA.bootstrap_servers,
    }
    argv = [sys.executable if image_cmd()[0] == "python" else image_cmd()[0], *image_cmd()[1:]]
    with (tmp_path / "web.log").open("wb") as log:
        process = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:

        def healthy() -> bool:
            assert process.poll() is None, (tmp_path / "web.log").read_text()
            try:
                return httpx.get(f"http://{HOST}:{port}/healthz", timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        wait_until(healthy, timeout=60)
        wait_until(lambda: run_health_check(port) == 0, timeout=30)  # /readyz: compose's health check passes
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_compose_names_the_hosts_it_serves_and_the_settings_read_them() -> None:
    """No `*` (any Host header) nor `.domain` (every sub-domain): the hosts are named, and the production
    settings read exactly those names from the value compose gives (its default when the environment sets none)."""
    given = str(compose()["x-environment"]["DJANGO_ALLOWED_HOSTS"])  # type: ignore[index]
    expression = re.fullmatch(r"\$\{DJANGO_ALLOWED_HOSTS:-([^}]*)\}", given)
    value = expression.group(1) if expression else given
    names = [name.strip() for name in value.split(",") if name.strip()]
    assert names, "compose names at least one host"
    assert not [name for name in names if "*" in name or name.startswith(".")], f"a wildcard host in {given!r}"
    probe = "from django.conf import settings; print(json.dumps(settings.ALLOWED_HOSTS))"
    env = production_env(DJANGO_SECRET_KEY=GOOD_KEY, DJANGO_ALLOWED_HOSTS=value)
    result = run([sys.executable, "-c", f"import json; {probe}"], env)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.splitlines()[-1]) == names
    assert "localhost" in names, "the published port is reached from this machine"
