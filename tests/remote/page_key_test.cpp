// The remote tier's keys (docs/remote-tier.md, "Keys"): the bytes hashed are defined to the byte,
// so these digests were computed outside kvcache (Python's hashlib over the documented layout);
// any change that would stop two builds from sharing pages fails here.
#include <cstring>

#include <gtest/gtest.h>

#include "kvcache/formats.hpp"
#include "kvcache/remote/page_key.hpp"

namespace kvcache::remote {
namespace {

Digest of(const char* text) {
  return sha256(std::span(reinterpret_cast<const std::uint8_t*>(text), std::strlen(text)));
}

TEST(PageKey, DigestsEqualTheDocumentedBytes) {
  EXPECT_EQ(hex(model_fingerprint("smollm2-135m@abc", {30, 9, 3, 64}, 0, 3)),
            "9ecaba771467aabafc38a136232a9c3d58fee01307460ae0ec476297960fe1f5");
  const KeyChain chain("tenant-a", "salt", of("a"), of("b"), 4);
  EXPECT_EQ(hex(chain.root()), "078b1db47bd651c92d4a85f9059f6a65e781b9e25f8536db20caed55acd35ac9");
  const std::vector<std::int32_t> tokens{1, 2, 3, -4, 5, 6, 7, 8, 9};
  const std::vector<Digest> digests = chain.digests(tokens, 5);
  ASSERT_EQ(digests.size(), 2u) << "full pages only";
  EXPECT_EQ(hex(digests[0]), "17efeb06b19b5b6acea4f6852ef965722d12f5d0bebfd052124a2413be57c6ce");
  EXPECT_EQ(hex(digests[1]), "9d632325d4706dcac47d248fef9b772a823aec07948a8943ebe71d6e9182d546");
  EXPECT_EQ(chain.key(digests[0]),
            "kvc1:tenant-a:17efeb06b19b5b6acea4f6852ef965722d12f5d0bebfd052124a2413be57c6ce");
}

TEST(PageKey, EveryPartOfTheIdentitySeparatesKeys) {
  const std::vector<std::int32_t> tokens{1, 2, 3, 4};
  const auto first = [&](const KeyChain& chain) { return chain.digests(tokens, 1).at(0); };
  const Digest base = first(KeyChain("t", "salt", of("a"), of("b"), 4));
  EXPECT_NE(first(KeyChain("t", "other salt", of("a"), of("b"), 4)), base);
  EXPECT_NE(first(KeyChain("t", "salt", of("other model"), of("b"), 4)), base);
  EXPECT_NE(first(KeyChain("t", "salt", of("a"), of("other format"), 4)), base);
  EXPECT_EQ(first(KeyChain("another label", "salt", of("a"), of("b"), 4)), base)
      << "the label names the namespace in the key, the salt separates it";
  // The parent is part of a page's digest: the same tokens after another page differ.
  const KeyChain chain("t", "salt", of("a"), of("b"), 2);
  const std::vector<std::int32_t> ab{1, 2, 3, 4}, cb{9, 9, 3, 4};
  EXPECT_NE(chain.digests(ab, 2)[1], chain.digests(cb, 2)[1]);

  const ModelShape model{2, 4, 2, 32};
  EXPECT_NE(model_fingerprint("m", model, 0, 2), model_fingerprint("m", model, 0, 1))
      << "a rank holding another KV head range";
  EXPECT_NE(model_fingerprint("m", model, 0, 2), model_fingerprint("m", {3, 4, 2, 32}, 0, 2));
  StoreInfo info{16, 8, 0, format_layout(parse_format("int8-per-token"), 32, 16),
                 format_layout(parse_format("fp16"), 32, 16)};
  const FormatIdentity formats{"int8-per-token", {}, "fp16", {}};
  const Digest f = format_fingerprint(formats, info);
  FormatIdentity swapped{"fp16", {}, "int8-per-token", {}};
  std::swap(info.k_format, info.v_format);
  EXPECT_NE(format_fingerprint(swapped, info), f);
  FormatIdentity grouped{"int8-per-token", {{"group", 64}}, "fp16", {}};
  std::swap(info.k_format, info.v_format);
  EXPECT_NE(format_fingerprint(grouped, info), f) << "options are part of the format";
  info.page_size = 32;
  EXPECT_NE(format_fingerprint(formats, info), f);
}

}  // namespace
}  // namespace kvcache::remote
