#!/usr/bin/env bash
# Builds the environment NeMo Evaluator's Gym client runs in (tests/test_clients_evaluator.py,
# examples/evaluator/): a Python 3.12 venv holding exactly what the hashed lock
# scripts/evaluator-env/nemo-evaluator-VERSION.lock.txt pins (nemo-evaluator and the import slice of
# its Gym client, scripts/evaluator-env/import-slice.in), `uv pip install --no-deps --require-hashes`.
# Usage: setup-evaluator-env.sh [TARGET_DIR] ; default .cache/evaluator-env; NEMO_EVALUATOR_VERSION
# (default 0.3.0) picks the lock; `make evaluator-env` runs it. A lock older than its input is
# refused with the command that remakes it (scripts/lock.sh evaluator VERSION).
# Idempotent: a target whose stamp matches the lock's sha256 and the interpreter is left as it is.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
target=${1:-$root/.cache/evaluator-env}
version=${NEMO_EVALUATOR_VERSION:-0.3.0}
uv=${UV:-$(command -v uv || echo "$root/.cache/uv-venv/bin/uv")}
lock="$here/evaluator-env/nemo-evaluator-$version.lock.txt"
if [ ! -f "$lock" ]; then
  echo "setup-evaluator-env: no lock for nemo-evaluator $version; make it with: scripts/lock.sh evaluator $version" >&2
  exit 1
fi
input=$(sed -n 's/^# input: \(scripts\/evaluator-env\/[^ ]*\) sha256:\([0-9a-f]*\)$/\1 \2/p' "$lock")
if [ "$(sha256sum "$root/${input% *}" | cut -d' ' -f1)" != "${input#* }" ]; then
  echo "setup-evaluator-env: ${input% *} changed since $lock was made; remake it: scripts/lock.sh evaluator $version" >&2
  exit 1
fi
python=$("$here/find-python.sh" 3.12)
stamp="$version $(sha256sum "$lock" | cut -c1-64) $python"
if [ -f "$target/.evaluator-env-stamp" ] && [ "$(cat "$target/.evaluator-env-stamp")" = "$stamp" ]; then
  exit 0
fi
echo "building NeMo Evaluator's environment in $target (nemo-evaluator $version on $python)" >&2
started=$(date +%s)
rm -rf "$target"
"$uv" venv -q --python "$python" "$target"
"$uv" pip install -q --python "$target/bin/python" --no-deps --require-hashes --compile-bytecode -r "$lock"
"$target/bin/python" -c "import nemo_evaluator.environments.gym, nemo_evaluator.solvers.gym, \
nemo_evaluator.solvers.tool_backend, nemo_evaluator.engine.eval_loop" >/dev/null
echo "$stamp" > "$target/.evaluator-env-stamp"
echo "built $target in $(( $(date +%s) - started )) s" >&2
