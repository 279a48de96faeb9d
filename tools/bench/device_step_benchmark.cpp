// kvcache-device-step-benchmark: `kvcache bench step --json` with the measured steps' tensors (new
// K/V rows, q, out) in GPU memory, as an engine holds them, so that a layer's time is the
// backend's alone: no copy of q or the output between host and device. The `kvcache` tool stays
// free of any vendor's runtime; this program is built per vendor from the GPU backends' runtime
// shim (backends/gpu-common/gpu_runtime.hpp): for CUDA here, and over the CPU emulator for its
// test.
//
//   kvcache-device-step-benchmark-cuda --batch 1 --tokens 4096 --layers 32 --q-heads 32
//       --kv-heads 8 --head-dim 128      (JSON as `kvcache bench step --json`'s)
#include <iostream>
#include <vector>

#include <CLI/CLI.hpp>

#include "gpu_runtime.hpp"
#include "kvcache/config.hpp"
#include "kvcache/registry.hpp"
#include "step_benchmark.hpp"

#if defined(KVCACHE_GPU_EMULATED)
emuActivity kvcache_emulator_activity{};  // the emulated runtime's counts (emulated_runtime.hpp)
#endif

namespace kvcache::tool {
namespace {

class DeviceMemory final : public TensorMemory {
 public:
  explicit DeviceMemory(int device) : stream_(device) {}
  std::string name() const override {
    return std::string(gpu::kVendor) + " device " + std::to_string(stream_.device());
  }
  DLDevice device() const override { return {gpu::kDeviceType, stream_.device()}; }
  void* copy_of(const void* host, std::size_t bytes) override {
    stream_.activate();
    void* p = buffers_.emplace_back(bytes).reserve(bytes);
    stream_.upload(p, host, bytes);
    stream_.synchronize();
    return p;
  }
  std::optional<EngineStream> stream() const override { return EngineStream{stream_.get()}; }

 private:
  gpu::Stream stream_;
  std::vector<gpu::DeviceBuffer> buffers_;
};

int run(int argc, char** argv) {
  CLI::App app("Decode steps through the Cache with q, out and new K/V rows in GPU memory");
  StepBenchOptions o;
  o.backend = gpu::kVendor;
  add_step_options(app, o);
  std::vector<std::string> plugins;
  app.add_option("--plugin", plugins, "a plugin file to load besides the default search");
  CLI11_PARSE(app, argc, argv);
  try {
    // The embedded default config's plugins (and KVCACHE_PLUGIN_PATH), as `kvcache` loads them.
    PluginSettings settings = default_config(process_environment()).plugins;
    for (const std::string& path : plugins) settings.paths.push_back({path, true, {}});
    DeviceMemory memory(0);  // the backend's default device
    const StepBenchResult r = run_step_benchmark(Registry::load(settings), o, &memory);
    std::cout << to_json(o, r).dump() << '\n';
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "kvcache-device-step-benchmark: " << e.what() << '\n';
    return 1;
  }
}

}  // namespace
}  // namespace kvcache::tool

int main(int argc, char** argv) {
  return kvcache::tool::run(argc, argv);
}
