// The JSONL request trace reader of `kvcache bench --trace`: any bytes either read as requests
// or throw kvcache::Error.
#include <cstddef>
#include <cstdint>

#include "fuzz_input.hpp"
#include "kvcache/status.hpp"
#include "request_trace.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace kvcache;
  const auto file = fuzz::as_file(data, size, ".jsonl");
  try {
    tool::read_trace(file.string());
  } catch (const Error&) {
    // refused with a message: the contract
  }
  return 0;
}
