#!/usr/bin/env bash
# Run a command with the embedded services up:
#
#   platform/with-services.sh [--only postgres,redis,kafka] -- CMD ARGS...
#
# Starts (or reuses) the services through platform/services.py, exports
# DATABASE_URL / REDIS_URL / KAFKA_BOOTSTRAP_SERVERS, runs CMD (in this
# process group, with this input: Ctrl-C and the terminal reach it), then stops
# exactly the services this invocation started (also after an error, Ctrl-C,
# SIGTERM or SIGHUP) and exits with CMD's status (128 + the signal's number
# after a signal).
# Services that were already running, or given through their URL variable, are
# left alone. docs/operations.md ("Stopping") gives the time a stop takes.
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

# How long CMD has to stop after a signal before it and all its descendants are killed.
STOP_GRACE_S=15

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

# Signals. Ctrl-C (SIGINT) and a closed terminal (SIGHUP) reach the whole foreground process group, CMD
# included; SIGTERM (a process manager, `timeout`, `make` passing on its own) usually reaches this process alone.
# CMD runs in the background while this shell waits for it, as bash runs a trap only once a foreground child has
# ended. On the first signal the processes CMD started are noted (honcho runs each of its processes in a session
# of its own: only their parentage finds them), and SIGTERM or SIGHUP is passed on to CMD as SIGTERM (a
# platform/start.sh run ignores the hangup itself, so that honcho lives to stop its processes in order); SIGINT
# is not, as CMD had it already and twice would cut pytest's teardown short. Whatever of them outlives CMD gets
# SIGTERM; whatever still runs STOP_GRACE_S seconds after the signal gets SIGKILL. Then the services stop.
child=""
tree=""
interrupted=0
stop_deadline=0

# The pids of every descendant of $1, whatever its session.
descendants() {
    local pid
    for pid in $(pgrep -P "$1" || true); do
        echo "$pid"
        descendants "$pid"
    done
}

# Those of the pids given that still run.
running() {
    local pid
    for pid in "$@"; do
        if kill -0 "$pid" 2>/dev/null; then
            echo "$pid"
        fi
    done
}

# shellcheck disable=SC2317  # invoked through the traps
on_signal() {
    local name="$1" status="$2"
    if [ "$interrupted" -eq 0 ]; then
        interrupted="$status"
        stop_deadline=$((SECONDS + STOP_GRACE_S))
    fi
    if [ -n "$child" ]; then
        tree="$tree $(descendants "$child")"
        if [ "$name" != INT ]; then
            kill -TERM "$child" 2>/dev/null || true
        fi
    fi
}
trap 'on_signal INT 130' INT
trap 'on_signal TERM 143' TERM
trap 'on_signal HUP 129' HUP

# services.py rolls back what it started itself when it fails or is interrupted. A signal meanwhile is
# acted on once it returns.
env_lines="$("$PY" "$SERVICES" up "${only[@]}")"
eval "$env_lines"
if [ "$interrupted" -ne 0 ]; then
    exit "$interrupted"
fi

# A background job of a script starts with SIGINT ignored and its input from /dev/null: give CMD back Ctrl-C
# and the terminal (pytest's --pdb reads it).
(
    trap - INT QUIT
    exec "$@"
) <&0 &
child=$!
if [ "$interrupted" -ne 0 ]; then # a signal came before $child was known
    kill -TERM "$child" 2>/dev/null || true
fi
while kill -0 "$child" 2>/dev/null && [ "$interrupted" -eq 0 ]; do
    wait "$child" || true # returns early when a trap runs
done
if [ "$interrupted" -ne 0 ]; then
    # CMD stops, then what it started and left behind, until the deadline.
    while [ "$SECONDS" -lt "$stop_deadline" ]; do
        # shellcheck disable=SC2086  # one pid a word
        if kill -0 "$child" 2>/dev/null; then
            sleep 0.1 # polled: the deadline is checked in between
        elif left=$(running $tree) && [ -n "$left" ]; then
            # shellcheck disable=SC2086
            kill -TERM $left 2>/dev/null || true
            sleep 0.1
        else
            break
        fi
    done
    # shellcheck disable=SC2086
    left=$(running "$child" $tree $(descendants "$child") | sort -un)
    if [ -n "$left" ]; then
        echo "with-services.sh: still running ${STOP_GRACE_S}s after the signal, killed:" $left >&2
        # shellcheck disable=SC2086
        kill -KILL $left 2>/dev/null || true
    fi
fi
set +e
wait "$child"
status=$?
set -e
if [ "$interrupted" -ne 0 ]; then
    exit "$interrupted"
fi
exit "$status"
