#!/usr/bin/env bash
# Run a command with the embedded services up:
#
#   platform/with-services.sh [--only postgres,redis,kafka] -- CMD ARGS...
#
# Starts (or reuses) the services through platform/services.py, exports
# DATABASE_URL / REDIS_URL / KAFKA_BOOTSTRAP_SERVERS, runs CMD in the
# foreground, then stops exactly the services this invocation started (also
# after an error, Ctrl-C or SIGTERM) and exits with CMD's status. Services that
# were already running, or given through their URL variable, are left alone.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="$ROOT/.venv/bin/python"
SERVICES="$ROOT/platform/services.py"

usage() {
    echo "usage: $0 [--only postgres,redis,kafka] -- CMD ARGS..." >&2
    exit 2
}

only=()
while [ "$#" -gt 0 ]; do
    case "$1" in
        --only) [ "$#" -ge 2 ] || usage; only=(--only "$2"); shift 2 ;;
        --only=*) only=(--only "${1#--only=}"); shift ;;
        --) shift; break ;;
        -h|--help) usage ;;
        *) break ;;
    esac
done
[ "$#" -gt 0 ] || usage

if [ ! -x "$PY" ]; then
    echo "with-services.sh: $PY missing; run platform/install.sh first" >&2
    exit 1
fi

STARTED_SERVICES=""
# shellcheck disable=SC2317  # invoked through the EXIT trap
cleanup() {
    local started="$STARTED_SERVICES"
    STARTED_SERVICES=""
    if [ -n "$started" ]; then
        "$PY" "$SERVICES" down --only "$started" || true
    fi
}
trap cleanup EXIT
# A signal that reaches us (not only CMD) is handled once the running command
# has ended: bash defers traps while it waits for a foreground child. Ctrl-C
# reaches CMD directly, as it shares our process group.
interrupted=0
trap 'interrupted=130' INT
trap 'interrupted=143' TERM

# services.py rolls back what it started itself when it fails or is interrupted.
env_lines="$("$PY" "$SERVICES" up "${only[@]}")"
eval "$env_lines"
if [ "$interrupted" -ne 0 ]; then
    exit "$interrupted"
fi

set +e
"$@"
status=$?
set -e
exit "$status"
