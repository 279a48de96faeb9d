#!/usr/bin/env bash
# Stages a built tree for a GPU machine that has a driver but none of the build's packages: the
# tool, the conformance suites and the plugins (not the HIP one), with the shared libraries they
# load from this machine beside them. Then, there:
#
#   tools/gpu-stage.sh .gpu                           # here, after building `build`
#   SKIP_BUILD=1 BUILD_DIR=.gpu tools/gpu-check.sh    # there (the script finds .gpu/deps)
#
# C and C++ runtimes stay with the system (deps-std holds this machine's libstdc++ and libgcc_s
# for a system older than this one: gpu-check.sh adds it only when the tool does not start).
set -euo pipefail
cd "$(dirname "$0")/.."

out=${1:?usage: tools/gpu-stage.sh OUT_DIR [BUILD_DIR]}
build=${2:-build}
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib" "$out/deps" "$out/deps-std"
cp "$build"/bin/{kvcache,store_conformance_test,attention_conformance_test,step_test,kvcache-kernel-benchmark} \
  "$out/bin/"
if [[ -f $build/bin/kvcache-device-step-benchmark-cuda ]]; then
  cp "$build/bin/kvcache-device-step-benchmark-cuda" "$out/bin/"
fi
cp -a "$build"/lib/libkvcache.so* "$out/lib/"
for plugin in "$build"/lib/kvcache-*.so; do
  [[ $(basename "$plugin") == kvcache-hip.so ]] || cp "$plugin" "$out/lib/"
done
ldd "$out"/bin/* "$out"/lib/*.so | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u |
  while read -r lib; do
    case $(basename "$lib") in
      libc.so* | libm.so* | libpthread.so* | libdl.so* | librt.so* | ld-linux*) ;;
      libstdc++.so* | libgcc_s.so*) cp -L "$lib" "$out/deps-std/" ;;
      libkvcache.so*) ;;
      *) cp -L "$lib" "$out/deps/" ;;
    esac
  done
du -sh "$out"
