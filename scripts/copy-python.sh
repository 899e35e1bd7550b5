#!/usr/bin/env bash
# Copies the CPython interpreter a venv runs on into DEST at the same absolute paths (DEST/<path>),
# so a later `COPY --from=STAGE DEST/ /` puts it into an image built on another base: the Dockerfile
# uses it when the Gym environment's Python (GYM_PYTHON_IMAGE, e.g. 3.13 for nemo-gym 0.7) differs
# from the bridge's (PYTHON_BASE, 3.12). Copied: the interpreter binary, its standard library with
# its bytecode, and libpython if it is a shared build; left out: site-packages (a venv does not read
# it), the test suite and static libraries (nothing here tests or embeds Python). Parent folders
# are made world-readable, so the image's non-root user can run it. Works for python:3.X-slim (/usr/local,
# libpython found through ldconfig: run it after the COPY) and for scripts/make-base-image.sh's
# stand-ins (a pyenv prefix, libpython found through the binary's rpath).
# Usage: copy-python.sh PYTHON DEST
set -euo pipefail
python=$(readlink -f "${1:?usage: copy-python.sh PYTHON DEST}")
dest=${2:?usage: copy-python.sh PYTHON DEST}
read -r prefix minor < <("$python" -c 'import sys; print(sys.base_prefix, "%d.%d" % sys.version_info[:2])')
mkdir -p "$dest"
# Leading folders and files, named from the root, copied with their modes (tar keeps symlinks).
paths=("${python#/}" "${prefix#/}/lib/python$minor")
for lib in "$prefix/lib/libpython$minor".so*; do [ -e "$lib" ] && paths+=("${lib#/}"); done
tar -C / -c --exclude="${prefix#/}/lib/python$minor/site-packages/*" --exclude="${prefix#/}/lib/python$minor/test" \
  --exclude="*.a" "${paths[@]}" \
  | tar -C "$dest" -x
d=$(dirname "$python")
while [ "$d" != / ]; do chmod 755 "$dest$d"; d=$(dirname "$d"); done
chmod -R a+rX "$dest"
echo "copy-python: Python $minor from $prefix into $dest ($(du -sh "$dest" | cut -f1))" >&2
