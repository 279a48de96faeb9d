#!/usr/bin/env bash
# Installs the Debian 12 packages that building and testing kvcache needs, only those missing.
set -euo pipefail

packages=(
  cmake ninja-build g++ ccache git clang-format
  libboost-dev libboost-context-dev libtbb-dev libspdlog-dev libfmt-dev libyaml-cpp-dev nlohmann-json3-dev
  libcli11-dev libdlpack-dev libgtest-dev libgmock-dev libbenchmark-dev
  hipcc libamdhip64-dev  # the ROCm/HIP backend builds everywhere (CUDA uses nvcc when present)
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

sudo=()
if ((EUID != 0)); then sudo=(sudo); fi
echo "install-deps: installing ${missing[*]}"
"${sudo[@]}" apt-get update -qq
DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
