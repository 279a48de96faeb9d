// A plugin whose descriptor is built from fuzz bytes: wrong struct sizes, null tables and names,
// absurd counts and capability values, repeated components, failing and throwing entries. The
// descriptor fuzz target hands it the bytes (kvcache_test_set_descriptor_bytes) and loads it.
// Its arrays are as long as the host's bounds allow (plugin/descriptor_check.hpp), so a count
// within them is readable and one past them must be refused before the host reads anything.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "kvcache/plugin_abi.h"

namespace {

constexpr std::uint32_t kComponents = 256;  // the host's kMaxComponents
constexpr std::uint32_t kListed = 64;       // the host's kMaxListed
constexpr std::uint32_t kTableWords = 64;   // larger than any table of this ABI

// Reads the fuzz bytes front to back; past the end every read is 0.
class Bytes {
 public:
  explicit Bytes(const std::vector<std::uint8_t>& b) : bytes_(b) {}
  std::uint8_t byte() { return at_ < bytes_.size() ? bytes_[at_++] : 0; }
  std::uint32_t word() {
    std::uint32_t w = 0;
    for (int i = 0; i < 4; ++i) w = (w << 8) | byte();
    return w;
  }
  // A count: mostly small, sometimes at or just past the host's bound, sometimes absurd.
  std::uint32_t count(std::uint32_t bound) {
    const std::uint8_t b = byte();
    switch (b >> 5) {
      case 6:
        return bound + (b & 1u);
      case 7:
        return (b & 1u) != 0 ? 0xFFFFFFFFu : 0x80000000u;
      default:
        return b & 7u;
    }
  }
  // A struct size: right, shorter, or longer than the writer's own.
  std::uint32_t size_of(std::uint32_t right) {
    const std::uint8_t b = byte();
    switch (b & 3u) {
      case 1:
        return right > 0 ? b % right : 0;
      case 2:
        return right + b;
      default:
        return right;
    }
  }

 private:
  const std::vector<std::uint8_t>& bytes_;
  std::size_t at_ = 0;
};

const std::string kLongName(2000, 'n');
const char* const kNames[] = {"fp16", "int8",      "causal",       "lru",  "cpu-tbb",        "fuzz",
                              "",     "two words", "\xe5\x90\x8d", "fp16", kLongName.c_str()};

const char* name(Bytes& in) {
  const std::uint8_t b = in.byte();
  if (b == 0xFF) return nullptr;
  return kNames[b % (sizeof(kNames) / sizeof(kNames[0]))];
}

int32_t available(kvc_error*) {
  return KVC_OK;
}
int32_t unavailable(kvc_error* err) {
  err->code = KVC_UNAVAILABLE;
  std::memset(err->message, 'x', sizeof(err->message));  // not terminated: the host must bound it
  return KVC_UNAVAILABLE;
}
int32_t odd_code(kvc_error*) {
  return 12345;
}
int32_t throws(kvc_error*) {
  throw std::runtime_error("availability throws despite the ABI");
}

struct State {
  std::vector<std::uint8_t> bytes;
  kvc_plugin_descriptor descriptor{};
  kvc_component components[kComponents]{};
  kvc_capabilities capabilities[kComponents]{};
  const char* formats[kComponents][kListed]{};
  std::uint32_t head_dims[kComponents][kListed]{};
  std::uint32_t page_sizes[kComponents][kListed]{};
  std::uint32_t tables[kComponents][kTableWords]{};
};
State state;

std::uint32_t listed(Bytes& in, std::uint32_t* values) {
  const std::uint32_t n = in.count(kListed);
  for (std::uint32_t i = 0; i < n && i < kListed; ++i) {
    const std::uint8_t b = in.byte();
    values[i] = b == 0xFF ? 0xFFFFFFFFu : b == 0xFE ? 2048u : 1u << (b % 12);
    if (b == 0xFD) values[i] = 0;
  }
  return n;
}

void fill_capabilities(Bytes& in, std::uint32_t c) {
  kvc_capabilities& k = state.capabilities[c];
  k = {};
  k.struct_size = in.size_of(sizeof(kvc_capabilities));
  k.n_formats = in.count(kListed);
  for (std::uint32_t i = 0; i < k.n_formats && i < kListed; ++i) state.formats[c][i] = name(in);
  k.formats = (in.byte() & 7u) == 0 ? nullptr : state.formats[c];
  k.n_head_dims = listed(in, state.head_dims[c]);
  k.head_dims = (in.byte() & 7u) == 0 ? nullptr : state.head_dims[c];
  k.n_page_sizes = listed(in, state.page_sizes[c]);
  k.page_sizes = (in.byte() & 7u) == 0 ? nullptr : state.page_sizes[c];
  k.device_kind = name(in);
  k.foreign_formats = in.byte() % 3;
  const char* const numerics[] = {"{}", "{\"accumulate\": \"fp32\"}", "[1, 2]", "{", "null"};
  const std::uint8_t n = in.byte();
  k.numerics_json = n % 6 == 5 ? nullptr : numerics[n % 6];
}

void fill_component(Bytes& in, std::uint32_t c) {
  kvc_component& out = state.components[c];
  out.struct_size = in.size_of(sizeof(kvc_component));
  out.kind = in.byte() % 7;  // 0, the four kinds, and kinds from a newer minor
  out.name = name(in);
  out.version = name(in);
  const std::uint8_t caps = in.byte();
  if (caps % 3 != 0) fill_capabilities(in, c);
  out.capabilities = caps % 3 == 0 ? nullptr : &state.capabilities[c];
  int32_t (*const checks[])(kvc_error*) = {nullptr, available, unavailable, odd_code, throws};
  out.availability = checks[in.byte() % 5];
  state.tables[c][0] = in.size_of(160);  // the table's struct_size: about the real ones
  out.table = (in.byte() & 7u) == 0 ? nullptr : state.tables[c];
}

}  // namespace

extern "C" __attribute__((visibility("default"))) void kvcache_test_set_descriptor_bytes(
    const std::uint8_t* data, std::size_t size) {
  state.bytes.assign(data, data + size);
}

extern "C" __attribute__((visibility("default"))) int32_t kvcache_plugin_entry(
    const kvc_host_info*, const kvc_plugin_descriptor** out, kvc_error* err) {
  Bytes in(state.bytes);
  switch (in.byte() % 16) {
    case 0:
      std::memset(err->message, 'e', sizeof(err->message));
      return KVC_INTERNAL;
    case 1:
      *out = nullptr;
      return KVC_OK;
    case 2:
      throw std::runtime_error("entry throws despite the ABI");
    default:
      break;
  }
  kvc_plugin_descriptor& d = state.descriptor;
  d.struct_size = in.size_of(sizeof(kvc_plugin_descriptor));
  d.abi_major = in.byte() % 8 == 0 ? in.word() : KVC_ABI_MAJOR;
  d.abi_minor = in.byte();
  d.name = name(in);
  d.version = name(in);
  d.n_components = in.count(kComponents);
  for (std::uint32_t c = 0; c < d.n_components && c < kComponents; ++c) fill_component(in, c);
  d.components = (in.byte() & 15u) == 0 ? nullptr : state.components;
  *out = &d;
  return KVC_OK;
}
