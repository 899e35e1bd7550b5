# shellcheck shell=bash
# Source this file to point podman, buildah and podman-compose at the project-local configuration
# that scripts/setup-podman.sh writes under .cache/podman/. Exports only into the sourcing shell.
#   . scripts/podman-env.sh
_podman_env_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PODMAN_CACHE_DIR=${PODMAN_CACHE_DIR:-$_podman_env_root/.cache/podman}
export PODMAN_CACHE_DIR
export CONTAINERS_CONF="$PODMAN_CACHE_DIR/containers.conf"
export CONTAINERS_STORAGE_CONF="$PODMAN_CACHE_DIR/storage.conf"
mkdir -p "$PODMAN_CACHE_DIR/tmp"
export TMPDIR="$PODMAN_CACHE_DIR/tmp"
unset _podman_env_root
# Docker image format, so HEALTHCHECK, STOPSIGNAL etc. survive `podman build` (the OCI format
# has no field for a healthcheck and podman would drop it with a warning).
export BUILDAH_FORMAT=docker
