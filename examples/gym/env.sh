# Source from the project root, after `make gym-env NEMO_GYM_VERSION=<version>` (or `make setup` for 0.4.0):
#   . examples/gym/env.sh 0.7.0      (or 0.4.0)
# puts that Gym environment's `gym`, `ng_run` and `ng_collect_rollouts` on PATH, with what Gym's
# launcher needs to build each server's venv: uv (make setup's .cache/uv-venv/bin) and the Python the Gym
# environment was made from (the launcher runs `uv venv --python <its version>`). nemo-gym 0.5+ declares
# Python >= 3.13.14; when the interpreter is an older 3.13, UV_CONFIG_FILE points uv at a config that
# installs as if it were 3.13.14 (nemo-gym runs on 3.13.0 here).
gym_version=${1:-0.7.0}
if [ "$gym_version" = 0.4.0 ]; then gym_venv=$PWD/.gym-env; else gym_venv=$PWD/.gym-env-$gym_version; fi
if [ ! -x "$gym_venv/bin/python" ]; then
  echo "no $gym_venv: run \`make gym-env NEMO_GYM_VERSION=$gym_version\` from the project root first" >&2
  return 1 2>/dev/null || exit 1
fi
gym_base=$(sed -n 's/^home *= *//p' "$gym_venv/pyvenv.cfg")
gym_uv=$(command -v uv 2>/dev/null || echo "$PWD/.cache/uv-venv/bin/uv")
export PATH="$gym_base:$(dirname "$gym_uv"):$gym_venv/bin:$PATH"
gym_minimum=$("$gym_venv/bin/python" - <<'PY'
import importlib.metadata as m, platform
declared = (m.metadata("nemo-gym")["Requires-Python"] or "").removeprefix(">=").strip()
older = declared.replace(".", "").isdigit() and tuple(map(int, platform.python_version().split("."))) < tuple(map(int, declared.split(".")))
print(declared if older else "")
PY
)
if [ -n "$gym_minimum" ]; then
  mkdir -p "$PWD/.cache/gym-launcher"
  printf '[pip]\npython-version = "%s"\n' "$gym_minimum" > "$PWD/.cache/gym-launcher/uv-$gym_version.toml"
  export UV_CONFIG_FILE=$PWD/.cache/gym-launcher/uv-$gym_version.toml
else
  unset UV_CONFIG_FILE
fi
unset VIRTUAL_ENV gym_venv gym_base gym_uv gym_minimum
echo "nemo-gym $gym_version: $(command -v ng_collect_rollouts | xargs dirname)${UV_CONFIG_FILE:+ (UV_CONFIG_FILE=$UV_CONFIG_FILE)}"
