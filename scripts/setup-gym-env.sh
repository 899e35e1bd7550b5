#!/usr/bin/env bash
# Builds the Gym environment a managed upstream runs in: a venv holding exactly what the hashed lock
# scripts/gym-env/nemo-gym-VERSION.lock.txt pins (nemo-gym plus the resource-server import slice of
# its release line), `uv pip install --no-deps --require-hashes`, and the one sdist-only package
# built with the hashed backend of scripts/gym-env/nemo-gym-VERSION.build.txt:
#   nemo-gym 0.2-0.4: Python 3.12 (lock input scripts/gym-env/import-slice-0.4.in)
#   nemo-gym 0.5+:    Python 3.13 (lock input scripts/gym-env/import-slice-0.7.in, measured on 0.7.0)
# Usage: setup-gym-env.sh TARGET_DIR [PYTHON] ; NEMO_GYM_VERSION (default 0.4.0) picks the release.
# `make gym-env NEMO_GYM_VERSION=0.7.0` runs it for .gym-env-0.7.0. A version with no lock is refused
# with the command that makes one (make gym-lock NEMO_GYM_VERSION=...); so is a lock older than its
# input, where the input is (a checkout; the image holds the lock alone). The lock is kept in the
# venv as TARGET_DIR/nemo-gym.lock.txt.
#
# nemo-gym 0.5 and later declare Requires-Python >= 3.13.14. An interpreter older than 3.13 is
# refused. Given an older 3.13 (pyenv's 3.13.0 on these machines) the install goes ahead as if the interpreter were 3.13.14 (uv --python-version, the
# same as pip's --ignore-requires-python) and says so; nemo-gym 0.7.0's resources servers and agent
# servers import and serve on 3.13.0 (docs/gym-versions.md). GYM_STRICT_PYTHON=1 refuses instead.
# Idempotent: a target whose stamp matches the version, the lock's sha256 and the interpreter is left
# as it is.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
target=${1:?usage: setup-gym-env.sh TARGET_DIR [PYTHON]}
version=${NEMO_GYM_VERSION:-0.4.0}
uv=${UV:-uv}
case "$version" in
  0.[0-4].*) minor=3.12 requires=3.12 ;;
  *) minor=3.13 requires=3.13.14 ;;
esac
lock="$here/gym-env/nemo-gym-$version.lock.txt"
if [ ! -f "$lock" ]; then
  echo "setup-gym-env: no lock for nemo-gym $version (scripts/gym-env/nemo-gym-$version.lock.txt);" \
    "make it with: make gym-lock NEMO_GYM_VERSION=$version" >&2
  exit 1
fi
build="$here/gym-env/nemo-gym-$version.build.txt"
if [ ! -f "$build" ] || ! grep -qx "# build: scripts/gym-env/nemo-gym-$version.build.txt sha256:$(sha256sum "$build" | cut -d' ' -f1)" "$lock"; then
  echo "setup-gym-env: scripts/gym-env/nemo-gym-$version.build.txt is missing or not the one its lock" \
    "was made with; regenerate both: make gym-lock NEMO_GYM_VERSION=$version" >&2
  exit 1
fi
input=$(sed -n 's/^# input: \(scripts\/gym-env\/[^ ]*\) sha256:\([0-9a-f]*\)$/\1 \2/p' "$lock")
if [ -f "$here/../${input% *}" ] && [ "$(sha256sum "$here/../${input% *}" | cut -d' ' -f1)" != "${input#* }" ]; then
  echo "setup-gym-env: ${input% *} changed since scripts/gym-env/nemo-gym-$version.lock.txt was" \
    "made; regenerate it: make gym-lock NEMO_GYM_VERSION=$version" >&2
  exit 1
fi
python=${2:-$("$here/find-python.sh" "$minor")}
stamp="$version $(sha256sum "$lock" | cut -c1-64) $python"
if [ -f "$target/.gym-env-stamp" ] && [ "$(cat "$target/.gym-env-stamp")" = "$stamp" ]; then
  exit 0
fi
have=$("$python" -c 'import platform; print(platform.python_version())')
resolve=()
if ! "$python" -c "import sys; sys.exit(sys.version_info[:2] < tuple(int(p) for p in '$minor'.split('.')))"; then
  echo "setup-gym-env: nemo-gym $version needs Python $minor (declared >= $requires); $python is $have" >&2
  exit 1
fi
if ! "$python" -c "import sys; sys.exit(sys.version_info[:3] < tuple(int(p) for p in '$requires'.split('.')))"; then
  if [ "${GYM_STRICT_PYTHON:-0}" = 1 ]; then
    echo "setup-gym-env: nemo-gym $version requires Python >= $requires; $python is $have (GYM_STRICT_PYTHON=1)" >&2
    exit 1
  fi
  echo "setup-gym-env: nemo-gym $version declares Python >= $requires; $python is $have:" \
    "installing as if it were $requires (pip's --ignore-requires-python); see docs/gym-versions.md" >&2
  resolve=(--python-version "$requires")
fi
echo "building the Gym environment in $target (nemo-gym $version on $python, Python $have)" >&2
started=$(date +%s)
rm -rf "$target"
"$uv" venv -q --python "$python" "$target"
"$uv" pip install -q --python "$target/bin/python" "${resolve[@]}" --no-deps --require-hashes --compile-bytecode \
  --build-constraints "$build" -r "$lock"
cp "$lock" "$target/nemo-gym.lock.txt"
"$target/bin/python" -c "import nemo_gym, resources_servers.example_session_state_mgmt.app" >/dev/null
echo "$stamp" > "$target/.gym-env-stamp"
echo "built $target in $(( $(date +%s) - started )) s" >&2
