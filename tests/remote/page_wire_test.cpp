// A shared page's value (docs/remote-tier.md, "Wire format"): what is written reads back, and a
// value that differs from the page expected in any field, in length or in one payload bit is
// refused, saying which.
#include <cstring>
#include <numeric>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "kvcache/remote/page_wire.hpp"

namespace kvcache::remote {
namespace {

using ::testing::HasSubstr;

Digest of(const char* text) {
  return sha256(std::span(reinterpret_cast<const std::uint8_t*>(text), std::strlen(text)));
}

class PageWire : public ::testing::Test {
 protected:
  const KeyChain chain{"t", "salt", of("model"), of("format"), 4};
  const std::vector<std::int32_t> tokens{10, 11, 12, 13, 14, 15, 16, 17};
  const std::vector<Digest> digests = chain.digests(tokens, 2);
  const PageIdentity second{&chain, 1, digests[0], digests[1], std::span(tokens).subspan(4, 4)};
  std::vector<std::byte> payload = [] {
    std::vector<std::byte> p(1000);
    for (std::size_t i = 0; i < p.size(); ++i) p[i] = static_cast<std::byte>(i * 7);
    return p;
  }();
  std::vector<std::byte> value = encode_page(second, payload);

  std::string problem(const std::vector<std::byte>& v, const PageIdentity& expected) const {
    const Checked c = check_page(v, expected, payload.size());
    EXPECT_TRUE(c.payload.empty());
    return c.problem;
  }
};

TEST_F(PageWire, AValueReadsBackAsItsPage) {
  ASSERT_EQ(value.size(), header_bytes(4) + payload.size());
  const Checked c = check_page(value, second, payload.size());
  ASSERT_TRUE(c.ok()) << c.problem;
  EXPECT_TRUE(std::equal(c.payload.begin(), c.payload.end(), payload.begin(), payload.end()));
}

TEST_F(PageWire, EveryFieldThatDiffersIsNamed) {
  const std::uint64_t at_digests = 16, at_tokens = 16 + 128 + 16;
  const std::pair<std::uint64_t, const char*> fields[] = {{0, "magic"},
                                                          {8, "wire version"},
                                                          {12, "header length"},
                                                          {at_digests, "model fingerprint"},
                                                          {at_digests + 32, "format fingerprint"},
                                                          {at_digests + 64, "parent digest"},
                                                          {at_digests + 96, "page digest"},
                                                          {at_digests + 128, "page size"},
                                                          {at_digests + 136, "page index"},
                                                          {at_tokens, "token ids"},
                                                          {at_tokens + 16, "positions"},
                                                          {at_tokens + 48, "payload length"}};
  for (const auto& [at, name] : fields) {
    std::vector<std::byte> forged = value;
    forged[at] ^= std::byte{1};
    EXPECT_THAT(problem(forged, second), HasSubstr(name)) << "byte " << at;
  }
  std::vector<std::byte> flipped = value;
  flipped[header_bytes(4) + 500] ^= std::byte{0x10};
  EXPECT_THAT(problem(flipped, second), HasSubstr("payload does not match its digest"));
  std::vector<std::byte> digest = value;
  digest[header_bytes(4) - 1] ^= std::byte{1};
  EXPECT_THAT(problem(digest, second), HasSubstr("payload does not match its digest"));
}

TEST_F(PageWire, AValueOfAnotherPageOrLengthIsRefused) {
  std::vector<std::byte> truncated(value.begin(), value.end() - 1);
  EXPECT_THAT(problem(truncated, second), HasSubstr("bytes where"));
  std::vector<std::byte> longer = value;
  longer.push_back(std::byte{0});
  EXPECT_THAT(problem(longer, second), HasSubstr("bytes where"));
  EXPECT_THAT(problem({}, second), HasSubstr("a value of 0 bytes"));
  // The right bytes for the wrong page: the first page's value read for the second.
  const PageIdentity first{&chain, 0, chain.root(), digests[0], std::span(tokens).first(4)};
  EXPECT_FALSE(check_page(encode_page(first, payload), second, payload.size()).ok());
  // Another namespace (salt) or format writes other fingerprints or digests.
  const KeyChain other{"t", "pepper", of("model"), of("format"), 4};
  const std::vector<Digest> theirs = other.digests(tokens, 2);
  const PageIdentity foreign{&other, 1, theirs[0], theirs[1], std::span(tokens).subspan(4, 4)};
  EXPECT_THAT(problem(encode_page(foreign, payload), second), HasSubstr("parent digest"));
  const KeyChain format{"t", "salt", of("model"), of("int4"), 4};
  const PageIdentity reformatted{&format, 1, digests[0], digests[1],
                                 std::span(tokens).subspan(4, 4)};
  EXPECT_THAT(problem(encode_page(reformatted, payload), second), HasSubstr("format"));
}

}  // namespace
}  // namespace kvcache::remote
