#!/usr/bin/env bash
# Write the lock files from pyproject.toml (`make lock`, after adding, removing or changing a dependency there):
#   requirements-dev.lock  the dependencies and the dev extra: what platform/install.sh puts in .venv
#   requirements.lock      the dependencies alone, at the same versions: what docker/Dockerfile installs
# Each pins every package, those required by others too, with the sha256 of each of its files on PyPI, for CPython
# 3.11 on any operating system and processor (--universal). Both also pin pip and the build backend of
# pyproject.toml's [build-system], with which the project itself is then installed, editable and without
# dependencies.
#
# Pins already in the files are kept while pyproject.toml admits them, so adding a dependency moves nothing else.
# Arguments go to `uv pip compile`, for both files: `make lock ARGS=--upgrade` takes the newest releases that
# pyproject.toml admits, `make lock ARGS='--upgrade-package django'` the newest Django alone.
# docs/operations.md, "Dependencies", says how the lock files are used and checked.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

UV=.venv/bin/uv  # from the dev extra, at the version requirements-dev.lock pins
if [ ! -x "$UV" ]; then
    echo "lock.sh: $UV missing: run platform/install.sh first" >&2
    exit 1
fi

# pip, and what [build-system] requires: read, not repeated here, so that the two cannot differ.
tooling() {
    .venv/bin/python -c '
import tomllib
with open("pyproject.toml", "rb") as file:
    print("\n".join(["pip", *tomllib.load(file)["build-system"]["requires"]]))'
}

compile() {
    tooling | "$UV" pip compile --quiet pyproject.toml - --universal --python-version 3.11 --generate-hashes \
        --custom-compile-command "make lock" "$@"
}

compile --extra dev --output-file requirements-dev.lock "$@"
# Constrained by the file just written: the image runs the versions the tests ran.
compile --constraints requirements-dev.lock --output-file requirements.lock "$@"
echo "lock.sh: wrote requirements-dev.lock and requirements.lock; platform/install.sh installs them" >&2
