#!/usr/bin/env bash
# ctest's transformers tests: makes (or reuses) the pinned environment of tools/transformers-env.sh
# and runs, with the module this build made ($1: its folder), this folder's pytest suite or the
# Python script given after it ($2...). Prints "skipped: ..." (and exits 0) only when PyPI cannot
# be reached.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="$("$here/../../tools/transformers-env.sh")"
rc=$?
if ((rc == 3)); then
  echo "skipped: PyPI cannot be reached, so torch and transformers cannot be installed"
  exit 0
fi
((rc == 0)) || exit "$rc"
env="$(tail -n 1 <<<"$out")"
export PYTHONPATH="$1"
shift
if (($# > 0)); then exec "$env/bin/python" "$@"; fi
cd "$here" && exec "$env/bin/python" -m pytest -q -p no:cacheprovider -s "$here"
