#!/usr/bin/env bash
# Regenerates the hashed locks the Gym environment and uv are installed from (uv, from PyPI):
#
#   scripts/lock.sh gym [VERSION...]  scripts/gym-env/nemo-gym-VERSION.lock.txt for each VERSION
#                                     (none given: every lock already there); `make gym-lock`
#   scripts/lock.sh uv [UV_VERSION]   scripts/uv-requirements.txt (default: the version it pins);
#                                     `make uv-lock`
#   scripts/lock.sh evaluator [VERSION]  scripts/evaluator-env/nemo-evaluator-VERSION.lock.txt
#                                     (default 0.3.0): NeMo Evaluator's Gym client, see below
#
# A Gym lock is nemo-gym==VERSION with its hashes (installed --no-deps: not its training stack) plus
# a universal resolution (every OS and architecture, so x86_64 and aarch64 images install the same
# versions) of the import slice of its release line, every file hashed:
#   nemo-gym 0.2-0.4: scripts/gym-env/import-slice-0.4.in, Python >= 3.12
#   nemo-gym 0.5+:    scripts/gym-env/import-slice-0.7.in, Python >= 3.13.14 (measured on 0.7.0)
# Its header records the input's sha256, so a lock older than its input is seen (setup-gym-env.sh
# refuses it, tests/test_gym_lock.py fails), and that of nemo-gym-VERSION.build.txt, the hashed
# build backend (setuptools, wheel) for the one sdist-only package, made beside it. A lock for the Dockerfile's default NEMO_GYM_VERSION also
# sets the Dockerfile's NEMO_GYM_LOCK_SHA256 default (the image's io.nemo-gym.lock label).
# Bumping: edit the input (or nothing, to take the newest releases it allows), run this, commit both.
set -euo pipefail
cd "$(dirname "$0")/.."
uv=${UV:-$(command -v uv || echo .cache/uv-venv/bin/uv)}
what=${1:?usage: scripts/lock.sh gym [VERSION...] | uv [UV_VERSION] | evaluator [VERSION]}
shift

lock_gym() {
  local version=$1 minor input lock tmp
  case "$version" in
    0.[0-4].*) minor=3.12 input=scripts/gym-env/import-slice-0.4.in ;;
    *) minor=3.13.14 input=scripts/gym-env/import-slice-0.7.in ;;
  esac
  lock=scripts/gym-env/nemo-gym-$version.lock.txt build=scripts/gym-env/nemo-gym-$version.build.txt
  tmp=$(mktemp -d)
  # What builds a package published as an sdist only (antlr4-python3-runtime, hydra-core's): its
  # build backend, pinned by hash too (uv pip install --build-constraints).
  printf 'setuptools\nwheel\n' > "$tmp/build.in"
  {
    echo "# The build backend for the sdists of $lock (uv pip install --build-constraints)."
    echo "# Made with it by: make gym-lock NEMO_GYM_VERSION=$version (scripts/lock.sh), from PyPI"
    "$uv" pip compile -q --universal --generate-hashes --no-header --no-annotate \
      --python-version "$minor" "$tmp/build.in"
  } > "$build"
  echo "nemo-gym==$version" > "$tmp/nemo-gym.in"
  "$uv" pip compile -q --universal --generate-hashes --no-header --no-annotate --no-deps \
    --python-version "$minor" "$tmp/nemo-gym.in" -o "$tmp/nemo-gym.txt"
  "$uv" pip compile -q --universal --generate-hashes --no-header \
    --python-version "$minor" "$input" -o "$tmp/slice.txt"
  {
    echo "# nemo-gym $version and the resource-server import slice of its release line: every version"
    echo "# pinned, every file hashed, for every platform (a universal resolution, Python >= $minor)."
    echo "# Made by: make gym-lock NEMO_GYM_VERSION=$version (scripts/lock.sh), from PyPI"
    echo "# input: $input sha256:$(sha256sum "$input" | cut -d' ' -f1)"
    echo "# build: $build sha256:$(sha256sum "$build" | cut -d' ' -f1)"
    echo "# Installed by scripts/setup-gym-env.sh: uv pip install --no-deps --require-hashes -r THIS"
    cat "$tmp/nemo-gym.txt" "$tmp/slice.txt"
  } > "$lock"
  rm -rf "$tmp"
  echo "$lock: $(grep -c '^[A-Za-z0-9]' "$lock") packages, $(wc -c < "$lock") bytes," \
    "sha256 $(sha256sum "$lock" | cut -d' ' -f1)" >&2
  local default
  default=$(sed -n 's/^ARG NEMO_GYM_VERSION=//p' Dockerfile | head -n1)
  if [ "$version" = "$default" ]; then
    sed -i "s/^ARG NEMO_GYM_LOCK_SHA256=.*/ARG NEMO_GYM_LOCK_SHA256=$(sha256sum "$lock" | cut -d' ' -f1)/" Dockerfile
    echo "Dockerfile: NEMO_GYM_LOCK_SHA256 default set to this lock's sha256" >&2
  fi
}

lock_uv() {
  local version=$1 out=scripts/uv-requirements.txt
  {
    echo "# uv, pinned with a hash for each of its files on PyPI (every platform's wheel), installed"
    echo "# with pip --require-hashes by the Dockerfile's uv stage and the Makefile's .cache/uv-venv."
    echo "# Made by: make uv-lock UV_VERSION=$version (scripts/lock.sh)"
    echo "uv==$version" | "$uv" pip compile -q --universal --generate-hashes --no-header --no-annotate -
  } > "$out.tmp"
  mv "$out.tmp" "$out"
  echo "$out: uv $version, $(grep -c -- '--hash=sha256:' "$out") hashes" >&2
}

# NeMo Evaluator's Gym client for tests/test_clients_evaluator.py and examples/evaluator/:
# nemo-evaluator==VERSION with its hashes (installed --no-deps) plus the universal resolution of
# scripts/evaluator-env/import-slice.in (Python >= 3.12), every file hashed; installed into
# .cache/evaluator-env by scripts/setup-evaluator-env.sh.
lock_evaluator() {
  local version=$1 input=scripts/evaluator-env/import-slice.in lock tmp
  lock=scripts/evaluator-env/nemo-evaluator-$version.lock.txt
  tmp=$(mktemp -d)
  echo "nemo-evaluator==$version" > "$tmp/evaluator.in"
  "$uv" pip compile -q --universal --generate-hashes --no-header --no-annotate --no-deps \
    --python-version 3.12 "$tmp/evaluator.in" -o "$tmp/evaluator.txt"
  "$uv" pip compile -q --universal --generate-hashes --no-header \
    --python-version 3.12 "$input" -o "$tmp/slice.txt"
  {
    echo "# nemo-evaluator $version and the import slice of its Gym client: every version pinned, every"
    echo "# file hashed, for every platform (a universal resolution, Python >= 3.12)."
    echo "# Made by: scripts/lock.sh evaluator $version, from PyPI"
    echo "# input: $input sha256:$(sha256sum "$input" | cut -d' ' -f1)"
    echo "# Installed by scripts/setup-evaluator-env.sh: uv pip install --no-deps --require-hashes -r THIS"
    cat "$tmp/evaluator.txt" "$tmp/slice.txt"
  } > "$lock"
  rm -rf "$tmp"
  echo "$lock: $(grep -c '^[A-Za-z0-9]' "$lock") packages, sha256 $(sha256sum "$lock" | cut -d' ' -f1)" >&2
}

case "$what" in
  evaluator) lock_evaluator "${1:-0.3.0}" ;;
  gym)
    versions=("$@")
    if [ ${#versions[@]} -eq 0 ]; then
      for lock in scripts/gym-env/nemo-gym-*.lock.txt; do
        name=${lock##*/nemo-gym-}
        versions+=("${name%.lock.txt}")
      done
    fi
    for version in "${versions[@]}"; do lock_gym "$version"; done
    ;;
  uv) lock_uv "${1:-$(sed -n 's/^uv==\([^ ]*\).*/\1/p' scripts/uv-requirements.txt)}" ;;
  *) echo "usage: scripts/lock.sh gym [VERSION...] | uv [UV_VERSION] | evaluator [VERSION]" >&2; exit 2 ;;
esac
