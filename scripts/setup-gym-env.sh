#!/usr/bin/env bash
# Builds the Gym environment the upstream runs in: a venv on Python >= 3.12 holding nemo-gym
# (--no-deps) plus the resource-server import slice in scripts/gym-requirements.txt.
# Usage: setup-gym-env.sh TARGET_DIR [PYTHON] ; NEMO_GYM_VERSION (default 0.4.0) picks the release.
# Idempotent: a target whose marker matches the version and requirements is left as it is.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
target=${1:?usage: setup-gym-env.sh TARGET_DIR [PYTHON]}
python=${2:-$("$here/find-python.sh" 3.12)}
version=${NEMO_GYM_VERSION:-0.4.0}
uv=${UV:-uv}
stamp="$version $(sha256sum "$here/gym-requirements.txt" | cut -c1-16) $python"
if [ -f "$target/.gym-env-stamp" ] && [ "$(cat "$target/.gym-env-stamp")" = "$stamp" ]; then
  exit 0
fi
echo "building the Gym environment in $target (nemo-gym $version on $python)" >&2
rm -rf "$target"
"$uv" venv -q --python "$python" "$target"
"$uv" pip install -q --python "$target/bin/python" --no-deps "nemo-gym==$version"
"$uv" pip install -q --python "$target/bin/python" -r "$here/gym-requirements.txt"
"$target/bin/python" -c "import nemo_gym, resources_servers.example_session_state_mgmt.app" >/dev/null
echo "$stamp" > "$target/.gym-env-stamp"
