#!/usr/bin/env bash
# Install whatever this checkout needs and is missing on this machine:
#   - Debian packages: redis-server, chromium, postgresql-15 (binaries only;
#     no system service is started or used), a Java 17 runtime, Maven, and
#     haproxy (the edge in front of the web workers, platform/edge/; its system
#     service is not used either: platform/web.py runs it),
#   - Apache Kafka's jars for the embedded broker, copied by Maven from the pom
#     in platform/kafka/ into a cache outside the checkout (kept across clones;
#     skipped when the cache for this pom exists),
#   - Spark's Kafka source and Avro functions for the analytics rollup, copied
#     the same way from the pom in platform/spark/,
#   - the tests' schema registry (Apicurio Registry, built already), copied the
#     same way from the pom in platform/registry/ and unpacked in that cache,
#   - a Python 3.11 virtualenv at .venv holding exactly the packages of
#     requirements-dev.lock (each file checked against its sha256 there), and
#     the project itself, editable and without dependencies; skipped when
#     .venv/.installed-<sha256 of the lock file and pyproject.toml> exists.
# Idempotent, and quiet and fast (< 2 s) when nothing is missing.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

PG_BIN=/usr/lib/postgresql/15/bin

say() { printf 'install.sh: %s\n' "$*" >&2; }

# Run a noisy command with its output kept in a log; show the log only if it fails.
quietly() {
    local log rc=0
    log="$(mktemp)"
    "$@" >"$log" 2>&1 || rc=$?
    if [ "$rc" -ne 0 ]; then
        tail -n 40 "$log" >&2
        say "error: command failed (exit $rc): $*"
    fi
    rm -f "$log"
    return "$rc"
}

as_root() {
    if [ "$(id -u)" -eq 0 ]; then
        "$@"
    else
        sudo "$@"
    fi
}

# --- Debian packages -------------------------------------------------------
apt_pkgs=()
command -v redis-server >/dev/null 2>&1 || apt_pkgs+=(redis-server)
[ -x /usr/bin/chromium ] || apt_pkgs+=(chromium)
[ -x "$PG_BIN/postgres" ] && [ -x "$PG_BIN/initdb" ] && [ -x "$PG_BIN/pg_ctl" ] \
    || apt_pkgs+=(postgresql-15)
java_ok() { command -v java >/dev/null 2>&1 && java -version 2>&1 | grep -Eq 'version "(1[7-9]|2[0-9])'; }
java_ok || apt_pkgs+=(openjdk-17-jre-headless)
command -v mvn >/dev/null 2>&1 || apt_pkgs+=(maven)
[ -x /usr/sbin/haproxy ] || command -v haproxy >/dev/null 2>&1 || apt_pkgs+=(haproxy)

if [ "${#apt_pkgs[@]}" -gt 0 ]; then
    say "installing Debian packages: ${apt_pkgs[*]}"
    quietly as_root apt-get update
    quietly as_root env DEBIAN_FRONTEND=noninteractive \
        apt-get install -y --no-install-recommends "${apt_pkgs[@]}"
fi

# --- Python virtualenv -------------------------------------------------------
find_python311() {
    local cand
    for cand in python3.11 python3; do
        if command -v "$cand" >/dev/null 2>&1 \
            && "$cand" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' 2>/dev/null; then
            command -v "$cand"
            return 0
        fi
    done
    return 1
}

venv_ok() {
    [ -x .venv/bin/python ] \
        && .venv/bin/python -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' 2>/dev/null
}

if ! venv_ok; then
    py="$(find_python311)" || {
        say "error: no Python 3.11 interpreter found (need python3.11 or python3 == 3.11)"
        exit 1
    }
    say "creating virtualenv .venv with $py"
    rm -rf .venv
    "$py" -m venv .venv
fi

# The packages come from the lock file alone (platform/lock.sh writes it; docs/operations.md, "Dependencies"):
# --require-hashes refuses any file whose sha256 is not the one locked, and pip's resolver still checks that the
# locked set lacks nothing. The project is installed on top, editable, without dependencies, and with the locked
# build backend rather than one fetched for an isolated build. The stamp names both files: the lock for the
# packages, pyproject.toml for the project's own install.
LOCK=requirements-dev.lock
hash="$(cat "$LOCK" pyproject.toml | sha256sum | cut -d' ' -f1)"
stamp=".venv/.installed-$hash"
if [ ! -e "$stamp" ]; then
    say "installing Python packages into .venv from $LOCK"
    quietly .venv/bin/python -m pip install --require-hashes -r "$LOCK"
    quietly .venv/bin/python -m pip install --no-deps --no-build-isolation -e .
    # What an earlier lock installed and this one no longer pins goes: .venv holds the lock, no more.
    extraneous="$(.venv/bin/python platform/lockfile.py extraneous "$LOCK")"
    if [ -n "$extraneous" ]; then
        say "removing packages $LOCK no longer pins: $(echo $extraneous)"
        # shellcheck disable=SC2086  # one name a line
        quietly .venv/bin/python -m pip uninstall -y $extraneous
    fi
    rm -f .venv/.installed-*
    touch "$stamp"
    say "done"
fi

# --- Jars from Maven Central ----------------------------------------------------
# Each set lives in a cache directory outside the checkout that the Python side names after its pom's hash
# (config/jar_cache.py), so a changed pom gets a fresh copy; a directory holding .complete is left alone.
# Maven's own repository (~/.m2) keeps the downloads, so a new clone copies without fetching.
#   maven_copy [--then FUNCTION] WHAT DIR POM GOAL [MAVEN ARGS...]
# runs `mvn -q -B -f POM GOAL ARGS... -DoutputDirectory=DIR` into an emptied DIR, then FUNCTION DIR if given.
maven_copy() {
    local then=""
    if [ "$1" = --then ]; then
        then="$2"
        shift 2
    fi
    local what="$1" dir="$2" pom="$3"
    shift 3
    [ -e "$dir/.complete" ] && return 0
    say "fetching $what with Maven into $dir"
    rm -rf "$dir"
    mkdir -p "$dir"
    quietly mvn -q -B -f "$pom" "$@" -DoutputDirectory="$dir"
    if [ -n "$then" ]; then
        "$then" "$dir"
    fi
    touch "$dir/.complete"
    say "done"
}

# Apache Kafka's jars for the embedded broker (platform/embedded_kafka.py).
kafka_jars="$(.venv/bin/python platform/embedded_kafka.py jar-dir)"
maven_copy "Apache Kafka" "$kafka_jars" platform/kafka/pom.xml dependency:copy-dependencies -DincludeScope=runtime

# spark-sql-kafka-0-10, spark-avro and what they need beyond pyspark's jars: analytics/jobs/jars.py gives them to
# Spark as local jars.
spark_jars="$(.venv/bin/python -m analytics.jobs.jars)"
maven_copy "Spark's Kafka source" "$spark_jars" platform/spark/pom.xml \
    dependency:copy-dependencies -DincludeScope=runtime

# The tests' schema registry (platform/embedded_registry.py): Apicurio Registry's release archive (a Quarkus
# runner jar and its lib/), unpacked; the archive stays in ~/.m2 only.
unpack_registry() {
    tar -xzf "$1/apicurio-registry.tar.gz" -C "$1"
    rm "$1/apicurio-registry.tar.gz"
}
registry_app="$(.venv/bin/python platform/embedded_registry.py app-dir)"
maven_copy --then unpack_registry "Apicurio Registry" "$registry_app" platform/registry/pom.xml dependency:copy
