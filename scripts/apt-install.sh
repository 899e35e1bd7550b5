#!/usr/bin/env bash
# Installs the first of PACKAGE... that apt can install (Debian-like systems; sudo when not root),
# refreshing the package lists only when none installs from the cached ones. NAME prefixes errors.
# Used by the setup-*.sh scripts for what a benchmark or test needs from the system.
set -euo pipefail
name=${1:?usage: apt-install.sh NAME PACKAGE...}
shift
if ! command -v apt-get >/dev/null 2>&1; then
  echo "$name: this is not a Debian-like system; install one of: $*" >&2
  exit 1
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  sudo="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
for package in "$@"; do
  if $sudo apt-get install -y -q --no-install-recommends "$package" >/dev/null 2>&1; then
    exit 0
  fi
done
$sudo apt-get update -q >/dev/null
for package in "$@"; do
  if $sudo apt-get install -y -q --no-install-recommends "$package" >/dev/null; then
    exit 0
  fi
done
echo "$name: apt could not install any of: $*" >&2
exit 1
