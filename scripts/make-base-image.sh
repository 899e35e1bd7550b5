#!/usr/bin/env bash
# Makes a local stand-in for docker.io/library/python:3.X-slim in the Docker engine, so the
# project's real Dockerfile builds unchanged (`--build-arg PYTHON_BASE=python:3.12-slim`, and for a
# nemo-gym 0.7 upstream `--build-arg GYM_PYTHON_IMAGE=python:3.13-slim`) on machines that reach no
# container registry: the image is imported from a local rootfs, so nothing is pulled (docs/deployment.md,
# "How this was tested"):
#   1. debootstrap --variant=minbase bookworm + the libraries CPython links (cached under
#      .cache/base-image/rootfs, shared by every version)
#   2. this machine's CPython 3.X (scripts/find-python.sh 3.X) copied into the rootfs at the same
#      absolute path, parents made world-readable, symlinked as /usr/local/bin/python3|python|pip;
#      the interpreter a previous run copied in for another version is taken out first
#   3. the machine's CA bundle as /etc/ssl/certs/ca-certificates.crt, PIP_CERT/SSL_CERT_FILE set
#   4. tar | docker import  -> python:3.X-slim (= docker.io/library/python:3.X-slim)
# Idempotent and cached: does nothing when the tag exists and was made from the same inputs.
# Needs a Docker engine (scripts/setup-docker.sh).
# Usage: scripts/make-base-image.sh [3.12|3.13] [--force]     (default 3.12)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
minor=3.12
case "${1:-}" in 3.*) minor=$1; shift ;; esac
force=${1:-}
tag=python:$minor-slim
cache=$root/.cache/base-image
rootfs=$cache/rootfs
# 3.12's stamp keeps the name it had, so an existing stand-in (and the image layers built on it) stays.
stampfile=$cache/stamp
[ "$minor" = 3.12 ] || stampfile=$cache/stamp-$minor
ca=${BASE_IMAGE_CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}
# Shared libraries CPython's extension modules link against that minbase lacks (what
# python:3.12-slim carries too; tkinter's tcl/tk are left out, as there).
include=libssl3,libsqlite3-0,libncursesw6,libreadline8,libnsl2,libtirpc3,netbase,tzdata

python=$(readlink -f "$("$here/find-python.sh" "$minor")")
prefix=$(dirname "$(dirname "$python")")           # e.g. /root/.pyenv/versions/3.12.1
stamp="v3 docker $include $python $(sha256sum "$ca" | cut -c1-16)"
if [ "$force" != --force ] && [ -f "$stampfile" ] && [ "$(cat "$stampfile")" = "$stamp" ] \
  && docker image inspect "$tag" >/dev/null 2>&1; then
  exit 0
fi
start=$(date +%s)
mkdir -p "$cache"
if [ ! -f "$cache/rootfs.done" ] || [ "$(cat "$cache/rootfs.done")" != "$include" ]; then
  echo "make-base-image: debootstrap bookworm into $rootfs" >&2
  rm -rf "$rootfs"
  debootstrap --variant=minbase --include="$include" bookworm "$rootfs" http://deb.debian.org/debian >"$cache/debootstrap.log" 2>&1 \
    || { tail -20 "$cache/debootstrap.log" >&2; exit 1; }
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
  echo "$include" > "$cache/rootfs.done"
fi

echo "make-base-image: copying $prefix into the rootfs" >&2
# One interpreter per image: the one a run for another version left in the shared rootfs goes.
# (A rootfs from before this record holds the interpreter its 3.12 stamp names.)
if [ ! -f "$cache/copied" ] && [ -f "$cache/stamp" ]; then
  dirname "$(dirname "$(cut -d' ' -f4 "$cache/stamp")")" > "$cache/copied"
fi
if [ -f "$cache/copied" ]; then rm -rf "${rootfs:?}$(cat "$cache/copied")"; fi
rm -rf "${rootfs:?}$prefix" "$rootfs/usr/local/bin"
echo "$prefix" > "$cache/copied"
mkdir -p "$rootfs$prefix"
# The test suite and anything pip-installed on this machine stay out (python:3.X-slim ships only
# pip); so does the machine's sandbox .pth hook.
tar -C "$prefix" -c \
  --exclude="./lib/python$minor/test" --exclude="./lib/python$minor/idlelib" \
  --exclude="./lib/python$minor/site-packages/*" --exclude="__pycache__" . | tar -C "$rootfs$prefix" -x
for d in "$prefix/lib/python$minor/site-packages/pip" "$prefix/lib/python$minor/site-packages/pip-"*.dist-info; do
  [ -e "$d" ] && cp -a "$d" "$rootfs$prefix/lib/python$minor/site-packages/"
done
# A non-root user must be able to reach and run the interpreter.
d=$prefix
while [ "$d" != / ]; do chmod 755 "$rootfs$d"; d=$(dirname "$d"); done
chmod -R a+rX "$rootfs$prefix"
mkdir -p "$rootfs/usr/local/bin"
ln -sf "$python" "$rootfs/usr/local/bin/python3"
ln -sf "$python" "$rootfs/usr/local/bin/python"
ln -sf "$python" "$rootfs/usr/local/bin/python$minor"
ln -sf "$prefix/bin/pip3" "$rootfs/usr/local/bin/pip"
ln -sf "$prefix/bin/pip3" "$rootfs/usr/local/bin/pip3"
mkdir -p "$rootfs/etc/ssl/certs"
cp "$ca" "$rootfs/etc/ssl/certs/ca-certificates.crt"
chmod 644 "$rootfs/etc/ssl/certs/ca-certificates.crt"
missing=$(for f in "$rootfs$prefix/lib/python$minor/lib-dynload/"*.so; do
  chroot "$rootfs" ldd "${f#"$rootfs"}" 2>/dev/null | grep 'not found' | grep -v -E 'libt(cl|k)8' || true; done | sort -u)
if [ -n "$missing" ]; then echo "make-base-image: libraries missing in the rootfs: $missing" >&2; exit 1; fi

echo "make-base-image: importing $tag" >&2
docker rmi -f "$tag" >/dev/null 2>&1 || true
tar -C "$rootfs" -c . | docker import \
  --change 'ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt' \
  --change 'ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt' \
  --change 'ENV PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV LANG=C.UTF-8' \
  --change 'CMD ["python3"]' \
  - "$tag" >/dev/null
echo "$stamp" > "$stampfile"
echo "make-base-image: $tag ready in $(( $(date +%s) - start )) s" >&2
