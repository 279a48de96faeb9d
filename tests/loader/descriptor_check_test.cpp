// Malformed descriptors, each built by the fuzzed-descriptor plugin from bytes written here in the
// order it reads them (tests/fuzz/fuzzed_descriptor_plugin.cpp): each refuses the plugin with its
// reason, or lists a component with the reason it cannot run.
#include <dlfcn.h>

#include <cstdint>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "kvcache/registry.hpp"

namespace kvcache {
namespace {

using ::testing::HasSubstr;

// The plugin's choices, by the byte values that select them.
enum : std::uint8_t {
  kDescriptor = 3,   // the entry returns a descriptor
  kEntryThrows = 2,  // the entry throws
  kRightSize = 0,    // a struct_size equal to the writer's sizeof
  kRightMajor = 1,
  kFuzz = 5,  // name "fuzz"
  kCausal = 2,
  kMask = 3,
  kNoCapabilities = 0,
  kCapabilities = 1,
  kPresent = 1,  // a pointer that is there
  kNull = 0,     // for pointers read with `& 7`
  kAvailable = 1,
  kThrows = 4,
  kNullName = 0xFF,
  kAtBound = 0xC0,      // a count equal to the host's bound
  kPastBound = 0xC1,    // one more
  kAbsurd = 0xE1,       // 0xFFFFFFFF
  kNumericsList = 2,    // "[1, 2]"
  kNumericsObject = 0,  // "{}"
};

struct Component {
  std::uint8_t name = kCausal;
  std::vector<std::uint8_t> capabilities = {kNoCapabilities};
  std::uint8_t availability = kAvailable;
};

// Appends bytes one by one (vector::insert of a braced list trips GCC 12's -Warray-bounds).
void put(std::vector<std::uint8_t>& b, const std::vector<std::uint8_t>& bytes) {
  for (const std::uint8_t x : bytes) b.push_back(x);
}

// Capabilities with these formats (name bytes), no head dims, these page sizes (value bytes:
// 1 << (b % 12); 0xFE is 2048), and numerics.
std::vector<std::uint8_t> capabilities(std::vector<std::uint8_t> formats, bool formats_array,
                                       std::vector<std::uint8_t> page_sizes,
                                       std::uint8_t numerics = kNumericsObject) {
  std::vector<std::uint8_t> b;
  put(b, {kCapabilities, kRightSize, static_cast<std::uint8_t>(formats.size())});
  put(b, formats);
  put(b, {formats_array ? kPresent : kNull, 0, kPresent});
  put(b, {static_cast<std::uint8_t>(page_sizes.size())});
  put(b, page_sizes);
  put(b, {kPresent, kNullName, 0, numerics});
  return b;
}

std::vector<std::uint8_t> descriptor(const std::vector<Component>& components,
                                     std::uint8_t count = 0xFF) {
  std::vector<std::uint8_t> b;
  put(b, {kDescriptor, kRightSize, kRightMajor, 4, kFuzz, kFuzz});
  put(b, {count != 0xFF ? count : static_cast<std::uint8_t>(components.size())});
  for (const Component& c : components) {
    put(b, {kRightSize, kMask, c.name, kFuzz});
    put(b, c.capabilities);
    put(b, {c.availability, kRightSize, kPresent});
  }
  b.push_back(kPresent);
  return b;
}

class DescriptorCheck : public ::testing::Test {
 protected:
  // Loads the plugin with a descriptor from `bytes`: the reason it was refused, or "".
  std::string refusal(const std::vector<std::uint8_t>& bytes) {
    set_bytes()(bytes.data(), bytes.size());
    PluginSettings settings;
    settings.env_paths = {KVCACHE_FUZZED_DESCRIPTOR_PLUGIN};
    registry_ = Registry::load(settings);
    for (const RejectedPlugin& r : registry_->rejected())
      if (r.file == KVCACHE_FUZZED_DESCRIPTOR_PLUGIN) return r.reason;
    return "";
  }
  const ComponentInfo* mask(const std::string& name) const {
    const ComponentInfo* info = registry_->find(ComponentKind::mask, name);
    return info != nullptr && info->file == KVCACHE_FUZZED_DESCRIPTOR_PLUGIN ? info : nullptr;
  }

 private:
  using SetBytes = void (*)(const std::uint8_t*, std::size_t);
  static SetBytes set_bytes() {
    static void* handle = dlopen(KVCACHE_FUZZED_DESCRIPTOR_PLUGIN, RTLD_NOW | RTLD_LOCAL);
    return reinterpret_cast<SetBytes>(dlsym(handle, "kvcache_test_set_descriptor_bytes"));
  }
  std::shared_ptr<const Registry> registry_;
};

TEST_F(DescriptorCheck, AWellFormedOneLoads) {
  EXPECT_EQ(refusal(descriptor({Component{}})), "");
  ASSERT_NE(mask("causal"), nullptr);
  EXPECT_TRUE(mask("causal")->available);
}

TEST_F(DescriptorCheck, CountsPastTheBoundAreRefusedBeforeAnyRead) {
  EXPECT_EQ(refusal(descriptor({}, kPastBound)), "descriptor lists 257 components, more than 256");
  EXPECT_EQ(refusal(descriptor({}, kAbsurd)),
            "descriptor lists 4294967295 components, more than 256");
  Component many_formats{kCausal, capabilities(std::vector<std::uint8_t>(64, 0), true, {})};
  many_formats.capabilities[2] = kPastBound;  // 65 formats claimed over an array of 64
  EXPECT_THAT(refusal(descriptor({many_formats})),
              HasSubstr("lists 65 formats, more than the 64 a descriptor may list"));
}

TEST_F(DescriptorCheck, ACountWithoutItsArrayIsRefused) {
  const Component c{kCausal, capabilities({1, 2}, false, {})};
  EXPECT_EQ(refusal(descriptor({c})), "component #0 'causal' lists 2 formats but no array of them");
}

TEST_F(DescriptorCheck, NamesMustBeThereAndUnique) {
  EXPECT_EQ(refusal(descriptor({Component{kNullName}})), "component #0 has no name");
  EXPECT_EQ(refusal(descriptor({Component{}, Component{}})),
            "component #1 'causal' repeats the name of an earlier component of its kind");
  const Component unnamed_format{kCausal, capabilities({0, kNullName}, true, {})};
  EXPECT_EQ(refusal(descriptor({unnamed_format})), "component #0 'causal': format #1 has no name");
}

TEST_F(DescriptorCheck, AbsurdCapabilityValuesAreRefused) {
  const Component page{kCausal, capabilities({}, true, {4, 0xFE})};
  EXPECT_EQ(refusal(descriptor({page})),
            "component #0 'causal': lists page size 2048 (page sizes are 1 to 1024)");
  const Component numerics{kCausal, capabilities({}, true, {}, kNumericsList)};
  EXPECT_EQ(refusal(descriptor({numerics})),
            "component #0 'causal': numerics_json is not a JSON object");
}

TEST_F(DescriptorCheck, AThrowingEntryOrAvailabilityCheckIsContained) {
  EXPECT_EQ(refusal({kEntryThrows}),
            "entry function threw an exception: entry throws despite the ABI");
  EXPECT_EQ(refusal(descriptor({Component{kCausal, {kNoCapabilities}, kThrows}})), "");
  ASSERT_NE(mask("causal"), nullptr);
  EXPECT_FALSE(mask("causal")->available);
  EXPECT_EQ(mask("causal")->unavailable_reason,
            "its availability check threw: availability throws despite the ABI");
}

}  // namespace
}  // namespace kvcache
