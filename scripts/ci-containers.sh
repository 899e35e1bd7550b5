#!/usr/bin/env bash
# CI install steps for the container tests (tests/test_containers.py, marker `containers`):
# podman and its configuration (scripts/setup-podman.sh), then the local stand-in for
# python:3.12-slim (scripts/make-base-image.sh). Both are idempotent and cached; on a machine that
# has a Docker engine this is not needed (the tests use Docker when it answers).
# Afterwards: `. scripts/podman-env.sh` is optional for the tests (they source it themselves).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
t0=$(date +%s)
"$here/setup-podman.sh"
t1=$(date +%s)
"$here/make-base-image.sh"
t2=$(date +%s)
echo "ci-containers: podman ready in $((t1 - t0)) s, base image ready in $((t2 - t1)) s" >&2
