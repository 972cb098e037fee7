# The two commands of the README. Each installs what is missing first (Debian packages, .venv, Python packages).
SHELL := /bin/bash
.DEFAULT_GOAL := run
.PHONY: run test install lint services-up services-down

install:
	@platform/install.sh

## make run: services, platform (web, Celery worker and beat), demo route and producer; Ctrl-C stops it all.
## So do SIGTERM (make passes it on to its recipe's process) and SIGHUP (docs/operations.md, "Stopping"). Each
## recipe line below is one command, which bash runs in its own place: make's signal reaches that very process.
run: install
	@platform/with-services.sh -- platform/start.sh

## make test: ruff, mypy, import-linter and pytest against real Postgres, Redis and Kafka-protocol broker.
test: install
	@platform/with-services.sh -- platform/test.sh

lint: install
	@platform/test.sh --lint-only

## Keep the embedded services up between commands (make run / make test then reuse them).
services-up: install
	@.venv/bin/python platform/services.py up >/dev/null
	@.venv/bin/python platform/services.py status

services-down:
	@.venv/bin/python platform/services.py down
