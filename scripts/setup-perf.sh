#!/usr/bin/env bash
# perf for the profile benchmark (tools/profile.py, make profile): Debian's linux-perf, installed when perf is
# missing. Idempotent. Profiling another process also needs root or kernel.perf_event_paranoid <= 1.
set -euo pipefail
if ! { command -v perf >/dev/null 2>&1 && perf version >/dev/null 2>&1; }; then
  "$(dirname "$0")/apt-install.sh" setup-perf linux-perf
fi
perf version
