#!/usr/bin/env bash
# Installs the Debian 12 packages that building and testing kvcache needs, only those missing.
# --fuzz adds clang 16 and its runtimes (libFuzzer, the sanitizers) for the fuzz preset.
set -euo pipefail

packages=(
  cmake ninja-build g++ ccache git clang-format python3-dev python3-venv
  libboost-dev libboost-context-dev libtbb-dev libspdlog-dev libfmt-dev libyaml-cpp-dev nlohmann-json3-dev
  libcli11-dev libdlpack-dev libgtest-dev libgmock-dev libbenchmark-dev
  libssl-dev libxxhash-dev  # the shared tier: SHA-256 keys, XXH3-128 digests
  libhiredis-dev redis-server redis-tools  # its resp transport, and the server its tests start
  libmemcached-dev memcached  # its memcached transport, and the servers its tests start
  hipcc libamdhip64-dev  # the ROCm/HIP backend builds everywhere (CUDA uses nvcc when present)
)
if [[ "${1:-}" == "--fuzz" ]]; then
  packages+=(clang-16 libclang-rt-16-dev)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  echo "install-deps: all ${#packages[@]} packages present"
else
  sudo=()
  if ((EUID != 0)); then sudo=(sudo); fi
  echo "install-deps: installing ${missing[*]}"
  "${sudo[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# Python: a virtual environment in .venv (never the system's or the user's site) with what the
# module's build and the Python tests need, pinned in tools/python-requirements.txt. Without
# PyPI the build goes on without the Python module, and says so.
root="$(cd "$(dirname "$0")/.." && pwd)"
if [[ ! -x "$root/.venv/bin/python" ]]; then
  "${PYTHON:-python3}" -m venv "$root/.venv"
fi
if "$root/.venv/bin/pip" install -q --disable-pip-version-check \
     -r "$root/tools/python-requirements.txt"; then
  echo "install-deps: .venv has $(tr '\n' ' ' < "$root/tools/python-requirements.txt")"
else
  echo "install-deps: warning: could not install the Python requirements into .venv" >&2
fi
