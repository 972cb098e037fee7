# The two commands of the README. Each installs what is missing first (Debian packages, .venv, Python packages).
SHELL := /bin/bash
.DEFAULT_GOAL := run
.PHONY: run test install lint lock upgrade-check services-up services-down

install:
	@platform/install.sh

## make run: services, platform (web, Celery worker and beat), demo route and producer; Ctrl-C stops it all.
## So do SIGTERM and SIGHUP (docs/operations.md, "Stopping"). make passes SIGTERM on to the process of its recipe
## line, which is the shell: each line execs its command, so that the signal reaches it and no shell dies in its place.
run: install
	@exec platform/with-services.sh -- platform/start.sh

## make test: ruff, mypy, import-linter and pytest against real Postgres, Redis and Kafka-protocol broker.
test: install
	@exec platform/with-services.sh -- platform/test.sh

lint: install
	@platform/test.sh --lint-only

## make lock: write requirements-dev.lock and requirements.lock from pyproject.toml (after changing a dependency
## there); ARGS go to `uv pip compile`: ARGS=--upgrade, ARGS='--upgrade-package NAME'. docs/operations.md.
lock:
	@exec platform/lock.sh $(ARGS)

## make upgrade-check: the newest releases, pyproject.toml's upper bounds dropped, in a scratch environment under
## var/upgrade-check/; says which packages moved and runs tests/e2e and tests/streams/server against them (or the
## pytest ARGS given). docs/operations.md, "Python dependencies".
upgrade-check: install
	@exec platform/with-services.sh -- .venv/bin/python platform/upgrade_check.py $(ARGS)

## Keep the embedded services up between commands (make run / make test then reuse them).
services-up: install
	@exec .venv/bin/python platform/services.py up >/dev/null
	@exec .venv/bin/python platform/services.py status

services-down:
	@exec .venv/bin/python platform/services.py down
