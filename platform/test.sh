#!/usr/bin/env bash
# Linters, type checks, layer contracts, then the whole pytest suite. Run through `make test`.
set -euo pipefail
cd "$(dirname "$0")/.."
export DJANGO_SETTINGS_MODULE=config.settings.test
bin=.venv/bin
# One command a line: under `set -e`, a failure on the left of `&&` does not stop the script.
echo "== ruff"; "$bin/ruff" check .
"$bin/ruff" format --check .
echo "== mypy"; "$bin/mypy" .
echo "== import-linter"; "$bin/lint-imports"
[ "${1:-}" = "--lint-only" ] && exit 0
echo "== pytest"; "$bin/pytest" "$@"
