#!/usr/bin/env bash
# One sanitizer job: configures and builds a preset's tree beside the default one, then runs its
# ctest with the given arguments (the subset).
#   run.sh SOURCE_DIR PRESET "TARGETS" [ctest args...]     TARGETS "": everything
# A finding ends the test that tripped it (no recover), so any finding fails the job.
set -euo pipefail
source_dir="$1"
preset="$2"
targets="$3"
shift 3
cd "$source_dir"
cmake --preset "$preset" > /dev/null
# shellcheck disable=SC2086  # TARGETS is a list
cmake --build --preset "$preset" -j "$(nproc)" ${targets:+--target $targets}
ctest --preset "$preset" -j "$(nproc)" "$@"
