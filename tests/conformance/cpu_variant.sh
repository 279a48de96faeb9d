#!/usr/bin/env bash
# tests/conformance/cpu_variant.sh "CPU FLAGS" COMMAND...
# Runs COMMAND, cpu-tbb's cases with some kernel family switched off, only on a CPU that has one of
# the flags (/proc/cpuinfo): on any other the switch changes nothing, and the run would repeat the
# default one at the cost of minutes.
set -euo pipefail
flags=$1
shift
for flag in $flags; do
  if grep -qw -- "$flag" /proc/cpuinfo 2>/dev/null; then
    exec "$@"
  fi
done
echo "this CPU has none of: $flags; the run would repeat the default one"
