// The .npy and .safetensors readers: any bytes either read as tensors whose sizes check out and
// convert, or throw kvcache::Error. The first byte picks the file type.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "fuzz_input.hpp"
#include "kvcache/status.hpp"
#include "tensor_file.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace kvcache;
  if (size == 0) return 0;
  const auto file = fuzz::as_file(data + 1, size - 1, (data[0] & 1) ? ".npy" : ".safetensors");
  try {
    for (const auto& [name, tensor] : tool::read_tensors(file)) {
      tensor.check_size(file);
      if (tensor.dtype == "F32" || tensor.dtype == "F16" || tensor.dtype == "BF16")
        if (tensor.to_float(name).size() != tensor.elements()) std::abort();
    }
  } catch (const Error&) {
    // refused with a message: the contract
  }
  return 0;
}
