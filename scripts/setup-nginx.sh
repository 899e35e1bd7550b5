#!/usr/bin/env bash
# nginx for the capacity benchmark's floor (benchmarks/floors.py, make bench ARGS=calls): Debian's package, installed when
# /usr/sbin/nginx is missing. Idempotent. The benchmark runs it itself as a non-daemon child with a
# generated config in a temporary directory; the package's own service is neither needed nor started.
set -euo pipefail
if [ -x /usr/sbin/nginx ]; then
  exit 0
fi
command -v apt-get >/dev/null 2>&1 || exec "$(dirname "$0")/apt-install.sh" setup-nginx nginx  # says why not
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  sudo="sudo"
fi
# policy-rc.d 101: the package's postinst must not start a system nginx on port 80
policy=/usr/sbin/policy-rc.d
made_policy=0
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\nexit 101\n' | $sudo tee "$policy" >/dev/null
  $sudo chmod +x "$policy"
  made_policy=1
fi
trap '[ "$made_policy" = 1 ] && $sudo rm -f "$policy"' EXIT
"$(dirname "$0")/apt-install.sh" setup-nginx nginx-light nginx
/usr/sbin/nginx -v
