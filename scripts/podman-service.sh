#!/usr/bin/env bash
# Runs podman's Docker-compatible API (`podman system service`) on a unix socket, for the Docker
# SDK for Python and other Docker clients, with the project-local podman configuration.
#   scripts/podman-service.sh start    # prints the DOCKER_HOST value (unix://...) on stdout
#   scripts/podman-service.sh stop     # stops the service this script started (by its pid)
#   scripts/podman-service.sh status
# Socket and pid file: .cache/podman/service/{podman.sock,pid} (PODMAN_SERVICE_DIR overrides).
# `start` is idempotent: a service already answering on the socket is reused.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=scripts/podman-env.sh
. "$here/podman-env.sh"
dir=${PODMAN_SERVICE_DIR:-$PODMAN_CACHE_DIR/service}
sock=$dir/podman.sock
pidfile=$dir/pid
log=$dir/service.log

answering() {
  python3 - "$sock" <<'PY' 2>/dev/null
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.settimeout(2)
s.connect(sys.argv[1])
s.sendall(b"GET /_ping HTTP/1.0\r\nHost: d\r\n\r\n")
sys.exit(0 if b" 200 " in s.recv(200) else 1)
PY
}
ours() { [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; }

case ${1:-} in
  start)
    mkdir -p "$dir"
    if ours && answering; then echo "unix://$sock"; exit 0; fi
    if ours; then kill "$(cat "$pidfile")" 2>/dev/null || true; fi
    rm -f "$sock"
    # --time=0: never exit on idle; setsid: its own session, so stopping it stops its children.
    setsid podman system service --time=0 "unix://$sock" >"$log" 2>&1 < /dev/null &
    echo $! > "$pidfile"
    for _ in $(seq 1 100); do
      if answering; then echo "unix://$sock"; exit 0; fi
      if ! ours; then break; fi
      sleep 0.1
    done
    echo "podman-service: the service did not come up; log $log:" >&2
    tail -20 "$log" >&2 || true
    exit 1
    ;;
  stop)
    if ours; then
      pid=$(cat "$pidfile")
      kill -TERM "$pid" 2>/dev/null || true
      for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -f "$pidfile" "$sock"
    ;;
  status)
    if ours && answering; then echo "running: unix://$sock (pid $(cat "$pidfile"))"; else echo "not running"; exit 1; fi
    ;;
  *)
    echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
