#!/usr/bin/env bash
# Prints the real path of a CPython interpreter of the given minor version (e.g. 3.12).
# uv cannot use pyenv's shims, so pyenv installs are resolved to their real binaries first.
set -euo pipefail
want=${1:?usage: find-python.sh MAJOR.MINOR}
if command -v pyenv >/dev/null 2>&1; then
  for prefix in $(pyenv root)/versions/"$want".*; do
    if [ -x "$prefix/bin/python$want" ]; then echo "$prefix/bin/python$want"; exit 0; fi
  done
fi
for candidate in "/usr/local/bin/python$want" "/usr/bin/python$want"; do
  if [ -x "$candidate" ]; then echo "$candidate"; exit 0; fi
done
echo "find-python.sh: no Python $want found (install it, e.g. 'pyenv install $want' or 'apt-get install python$want')" >&2
exit 1
