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
# The whole suite: the tests marked `beside` mostly wait on servers of their own (a whole `make run`, a Celery beat's
# minute, an outage's clock), so they run in a second pytest beside the rest, on a test database and a Redis
# database of their own (15 is the Celery broker of tests/e2e/test_analytics.py). Their output follows the rest's.
# Arguments, or a REDIS_URL whose database cannot be told apart that way: one pytest.
if [ "$#" -gt 0 ] || ! [[ "${REDIS_URL:-}" =~ ^(rediss?://[^/]*)(/[0-9]?)?$ ]]; then
    echo "== pytest"
    exec "$bin/pytest" "$@"
fi
beside_redis="${BASH_REMATCH[1]}/14"
mkdir -p var
beside_log=var/test-beside.log
echo "== pytest (the tests marked beside run alongside: $beside_log, printed at the end)"
# A background job starts with SIGINT ignored: give it back, so that Ctrl-C ends both runs through their teardown.
(
    trap - INT QUIT
    TEST_DB_SUFFIX="${TEST_DB_SUFFIX:-}_beside" REDIS_URL="$beside_redis" \
        exec "$bin/pytest" -p no:cacheprovider -m beside
) >"$beside_log" 2>&1 </dev/null &
beside=$!
status=0
"$bin/pytest" -m "not beside" || status=$?
beside_status=0
wait "$beside" || beside_status=$?
echo "== pytest, the tests marked beside"
cat "$beside_log"
[ "$status" -ne 0 ] && exit "$status"
exit "$beside_status"
