#!/usr/bin/env bash
# One short run on a GPU machine verifies the CUDA backend: build, conformance, benchmarks.
#
#   tools/gpu-check.sh                    # build into build-gpu (CUDA architecture 90), then run
#   BUILD_DIR=build tools/gpu-check.sh    # reuse an existing build tree
#   CUDA_ARCHS="80;90" tools/gpu-check.sh
#   QUICK=1 tools/gpu-check.sh            # fewer benchmark shapes
#   SKIP_BUILD=1 BUILD_DIR=.gpu tools/gpu-check.sh    # a tree staged elsewhere by tools/gpu-stage.sh
#   SANITIZE=1 tools/gpu-check.sh         # also run a slice of the suites under compute-sanitizer
#
# Prints the device, the conformance result (the suite must run on cuda, not skip) and a table of
# decode attention for Llama-3-8B shapes: GB/s of KV read as a fraction of the device's bandwidth
# measured in the same run (a device-to-device copy), then the main job (`kvcache bench`, whose
# default backend list puts cuda first). JSON lines and the suites' logs go to $OUT when it is set,
# else to the build tree. Exit status: 0 all passed, 1 a failure, 2 no usable GPU.
set -euo pipefail
cd "$(dirname "$0")/.."

build=${BUILD_DIR:-build-gpu}
logs=${OUT:-$build}
archs=${CUDA_ARCHS:-90}
jobs=$(nproc)
start=$(date +%s)
step() { printf '\n== %s (%ds)\n' "$1" $(($(date +%s) - start)); }

step "device"
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
else
  echo "nvidia-smi not found"
fi

step "build ($build, CUDA architectures $archs)"
if [[ -n ${SKIP_BUILD:-} ]]; then
  echo "skipped: using $build as it is"
  # A tree built elsewhere (tools/gpu-stage.sh) brings the libraries it needs, and may come
  # without its test plugins: the suites then leave the CPU emulator out (not checked here).
  staged=$(cd "$build" && pwd)
  export LD_LIBRARY_PATH="$staged/lib:$staged/deps${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  "$build/bin/kvcache" --version >/dev/null 2>&1 ||
    export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$staged/deps-std"
  export KVCACHE_TEST_GPU_EMULATOR=${KVCACHE_TEST_GPU_EMULATOR-}
elif [[ ! -f "$build/CMakeCache.txt" ]]; then
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKVCACHE_WITH_HIP=OFF \
    "-DCMAKE_CUDA_ARCHITECTURES=$archs" >/dev/null
fi
if [[ -z ${SKIP_BUILD:-} ]]; then
  ninja -C "$build" -j "$jobs" kvcache-tool kvcache-cuda kvcache-cpu-tbb kvcache-masks \
    kvcache-formats store_conformance_test attention_conformance_test step_test >/dev/null
  echo "built"
fi

step "is the cuda backend available?"
"$build/bin/kvcache" plugins | grep -A2 -E "^ +backend +cuda " || true
if ! "$build/bin/kvcache" plugins --json |
  python3 -c 'import json,sys; c=[x for x in json.load(sys.stdin)["components"] if x["kind"]=="backend" and x["name"]=="cuda"]; sys.exit(0 if c and c[0]["available"] else 1)'; then
  echo "the cuda backend cannot run here (reason above): nothing to check"
  exit 2
fi

step "conformance on cuda"
status=0
for suite in store_conformance_test attention_conformance_test step_test; do
  log="$logs/gpu-check-$suite.log"
  if "$build/bin/$suite" --gtest_filter='*cuda*:AttentionOutputs.*' --gtest_brief=1 >"$log" 2>&1; then
    echo "$suite: $(grep -E '^\[  PASSED  \]' "$log")"
  else
    echo "$suite FAILED:"
    grep -E 'FAILED|Failure|what()' "$log" | head -20 || true
    status=1
  fi
done

step "decode attention benchmarks (Llama-3-8B: 32 q heads, 8 KV heads, head_dim 128, page 16)"
results=$logs/gpu-check.jsonl
: >"$results"
formats=(fp16 bf16 int8-per-token fp8-e4m3 int4-group)
tokens=(4096 8192 32768)
batches=(1 8 32)
if [[ -n ${QUICK:-} ]]; then
  tokens=(8192)
  batches=(8)
fi
printf '%-16s %7s %6s %10s %10s %9s %14s\n' format tokens batch "GB/s" "device GB/s" fraction tokens/s
for f in "${formats[@]}"; do
  for t in "${tokens[@]}"; do
    for b in "${batches[@]}"; do
      if ! line=$("$build/bin/kvcache" bench attention --backend cuda --format "$f" --tokens "$t" \
        --batch "$b" --min-seconds 0.3 --json 2>&1); then
        echo "$f $t x $b FAILED: $line"
        status=1
        continue
      fi
      echo "$line" >>"$results"
      echo "$line" | python3 -c 'import json,sys; r=json.load(sys.stdin); print("%-16s %7d %6d %10.0f %10.0f %9.2f %14.0f" % (r["k_format"], r["tokens"], r["batch"], r["gbps"], r["read_bandwidth_gbps"], r["bandwidth_fraction"], r["tokens_per_second"]))'
    done
  done
done
echo "JSON lines: $results"

step "main job on cuda (kvcache bench, embedded default config)"
if ! "$build/bin/kvcache" bench 2>&1 | tail -12; then
  echo "main job FAILED"
  status=1
fi

if [[ -n ${SANITIZE:-} ]]; then
  step "compute-sanitizer (memcheck, racecheck) on a slice of the suites"
  for tool in memcheck racecheck; do
    if timeout 100 compute-sanitizer --tool "$tool" --error-exitcode 3 "$build/bin/attention_conformance_test" \
      --gtest_filter='*/cuda_*_q8kv2_p16' --gtest_brief=1 \
      >"$logs/gpu-check-$tool.log" 2>&1; then
      echo "$tool: clean ($(grep -E '^\[  PASSED  \]' "$logs/gpu-check-$tool.log"))"
    else
      echo "$tool FAILED:"
      grep -E 'ERROR SUMMARY|Invalid|Race|FAILED' "$logs/gpu-check-$tool.log" | head -10 || true
      status=1
    fi
  done
fi

step "done (status $status)"
exit "$status"
