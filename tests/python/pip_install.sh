#!/usr/bin/env bash
# tests/python/pip_install.sh <repository> <scratch folder> <python> <C compiler> <C++ compiler>
# `pip install .` into a fresh virtual environment, as a user would (the build requirements from
# PyPI, pinned as in tools/python-requirements.txt), then, outside the source tree, the installed
# package runs a step on the plugins its wheel carries. Prints "skipped: ..." when PyPI cannot be
# reached.
set -euo pipefail
repo=$1 scratch=$2 python=$3 cc=$4 cxx=$5
rm -rf "$scratch" && mkdir -p "$scratch"
"$python" -m venv "$scratch/venv"
pip=("$scratch/venv/bin/pip" install -q --disable-pip-version-check)
if ! "${pip[@]}" -r "$repo/tools/python-requirements.txt"; then
  echo "skipped: PyPI unreachable, the build requirements could not be installed"
  exit 0
fi
# The main build's compilers and flags, so that ccache serves most objects (ccache hashes the
# compiler's name: scikit-build-core alone finds g++ where CMake found c++, and missed them all).
# The GPU backends are left out: the main build compiles them, and packaging installs them by the
# same rule as cpu-tbb.
"${pip[@]}" --no-build-isolation "$repo" \
  --config-settings=build-dir="$scratch/build" \
  --config-settings=cmake.define.CMAKE_C_COMPILER="$cc" \
  --config-settings=cmake.define.CMAKE_CXX_COMPILER="$cxx" \
  --config-settings=cmake.define.KVCACHE_WARNINGS_AS_ERRORS=ON \
  --config-settings=cmake.define.KVCACHE_WITH_CUDA=OFF \
  --config-settings=cmake.define.KVCACHE_WITH_HIP=OFF
cd "$scratch"
"$scratch/venv/bin/python" - <<'PY'
import pathlib
import numpy as np
import kvcache

package = pathlib.Path(kvcache.__file__).parent
assert "site-packages" in str(package), package
plugins = {p["name"]: p["file"] for p in kvcache.plugins()}
assert plugins["cpu-tbb"].startswith(str(package / "lib" / "kvcache" / "plugins")), plugins
cache = kvcache.Cache(model={"layers": 1, "q_heads": 2, "kv_heads": 1, "head_dim": 32},
                      backend=["cpu-tbb"], cache={"capacity": "4MiB"})
step = cache.begin_step(cache.add_sequence(), 3)
rows = np.ones((3, 1, 32), np.float32)
step.append(0, rows, rows)
out = step.prefill(0, np.ones((3, 2, 32), np.float32))
step.finish()
np.testing.assert_allclose(out, 1.0)
assert (package / "_kvcache.pyi").exists()
print("installed kvcache from", package, "runs on", cache.backend)
PY
