"""docker/Dockerfile and docker/compose.yaml, checked without a Docker engine (the machines have none).

The image must serve with platform/web.py (workers with write flow control) under the production settings, as a
user that is not root and cannot change the code, with platform/ in the image; compose must run the same. The
last test runs the image's command line here, with the image's environment, and asks it for /healthz.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import yaml
from django.conf import settings

from tests.conftest import wait_until
from tests.servers import HOST, ROOT, free_port, url_of_test_database
from tests.test_settings_production import GOOD_KEY

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
        if "DELIVERY_LOG_DIR" in environment:
            assert environment["DELIVERY_LOG_DIR"].startswith("/app/var/"), "the only place the user may write"
            assert any(volume.endswith(":" + environment["DELIVERY_LOG_DIR"]) for volume in service["volumes"])


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
        "DELIVERY_LOG_DIR": str(tmp_path),
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
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
