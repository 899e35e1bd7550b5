#!/usr/bin/env bash
# Installs podman and what it needs from Debian's packages and writes a project-local
# configuration for it under .cache/podman/ (see shared/CONTAINERS.md for why each setting exists:
# crun cannot run under this kernel's hybrid cgroups -> runc; the sandbox refuses raising
# RLIMIT_NOFILE above 20000 / RLIMIT_NPROC above 32768 -> explicit default ulimits).
#
# Idempotent: packages already installed are not reinstalled (apt-get update runs at most once,
# and only when something is missing); the config files are rewritten only when they differ.
# Nothing is exported globally: `source scripts/podman-env.sh` to use the configuration.
#
# Usage: scripts/setup-podman.sh            (as root; sudo is used when not root)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
cache=${PODMAN_CACHE_DIR:-$root/.cache/podman}

packages=(podman buildah runc fuse-overlayfs slirp4netns uidmap debootstrap iptables
  containernetworking-plugins golang-github-containernetworking-plugin-dnsname)

sudo_cmd=()
if [ "$(id -u)" != 0 ]; then sudo_cmd=(sudo); fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup-podman: installing ${missing[*]}" >&2
  start=$(date +%s)
  "${sudo_cmd[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  "${sudo_cmd[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
  echo "setup-podman: installed in $(( $(date +%s) - start )) s" >&2
fi

mkdir -p "$cache/storage" "$cache/run" "$cache/tmp"
write_if_changed() {  # write_if_changed FILE  (content on stdin)
  local tmp
  tmp=$(mktemp "$cache/.conf.XXXXXX")
  cat > "$tmp"
  if [ -f "$1" ] && cmp -s "$tmp" "$1"; then rm -f "$tmp"; else mv "$tmp" "$1"; fi
}
write_if_changed "$cache/containers.conf" <<CONF
# Written by scripts/setup-podman.sh; see shared/CONTAINERS.md.
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]

[engine]
runtime = "runc"
CONF
write_if_changed "$cache/storage.conf" <<CONF
# Written by scripts/setup-podman.sh; see shared/CONTAINERS.md.
[storage]
driver = "overlay"
graphroot = "$cache/storage"
runroot = "$cache/run"
CONF
# The engine resolves short names (python:3.12-slim) through registries.conf; with the stand-in
# base image tagged docker.io/library/python:3.12-slim locally, no pull is attempted.

# shellcheck source=scripts/podman-env.sh
. "$here/podman-env.sh"
podman --version >&2
