// The fixture of the store conformance cases (store_cases.cpp, truncate_cases.cpp): the case
// matrix, a reference model of each sequence (Shadow), model steps through a store, and the checks
// of its contents byte for byte and of its statistics against a recount.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "fixture.hpp"
#include "kvcache/formats.hpp"
#include "kvcache/numeric.hpp"

namespace kvcache::conformance {

struct StoreCase {
  std::string backend;
  std::string k_format;
  std::string v_format;
  std::uint32_t page_size;
  nlohmann::json k_options = nlohmann::json::object();
  nlohmann::json v_options = nlohmann::json::object();
};

inline void PrintTo(const StoreCase& c, std::ostream* os) {
  *os << c.backend << " K " << c.k_format << c.k_options.dump() << " V " << c.v_format
      << c.v_options.dump() << " page " << c.page_size;
}

inline std::string case_name(const ::testing::TestParamInfo<StoreCase>& info) {
  return test_name(info.param.backend + "_" + info.param.k_format + "_" + info.param.v_format +
                   "_p" + std::to_string(info.param.page_size) + "_" +
                   std::to_string(info.param.k_options.value("bits", 0)));
}

inline std::vector<StoreCase> store_cases() {
  std::vector<StoreCase> cases;
  for (const std::string& backend : backend_names()) {
    for (const std::string& f : format_names()) {
      const nlohmann::json options =
          f == "kivi-k" ? nlohmann::json{{"group", 4}} : nlohmann::json::object();
      cases.push_back({backend, f, f, 4, options, options});
    }
    cases.push_back({backend, "int8-per-token", "int4-group", 8});
    cases.push_back({backend, "fp16", "int8-per-token", 16});
    // KIVI as published: 2-bit keys per channel, paired with a per-token value format.
    cases.push_back({backend, "kivi-k", "int8-per-token", 16, {{"bits", 2}, {"group", 8}}});
    for (const std::string& f : extra_formats()) {  // alone, and beside a built-in format
      cases.push_back({backend, f, f, 4});
      cases.push_back({backend, f, "int8-per-token", 16});
      cases.push_back({backend, "fp16", f, 8});
    }
  }
  std::erase_if(cases, [](const StoreCase& c) { return !wanted(c.k_format, c.v_format); });
  return cases;
}

// The reference model of one sequence: its tokens, in slot order.
struct Token {
  std::int32_t id;
  Position pos;
};
struct Shadow {
  std::vector<Token> tokens;
  Position next_position = 0;
  int group = 0;  // sequences of a group share token ids: prefix hits
  bool compacted = false;
};

inline std::int32_t token_id(int group, Position pos) {
  return static_cast<std::int32_t>((pos * 7 + group) % 11);
}

class StoreConformance : public ::testing::TestWithParam<StoreCase> {
 protected:
  static constexpr std::uint32_t kLayers = 2;
  static constexpr std::uint32_t kHeads = 2;
  static constexpr std::uint32_t kDim = 32;

  void SetUp() override {
    record_case(GetParam().backend, GetParam().k_format + "/" + GetParam().v_format);
  }

  StoreSpec spec(std::uint64_t pages) const {
    StoreSpec s;
    s.model = {kLayers, 4, kHeads, kDim};
    s.page_size = GetParam().page_size;
    s.k_format = GetParam().k_format;
    s.v_format = GetParam().v_format;
    s.k_options = GetParam().k_options;
    s.v_options = GetParam().v_options;
    s.poison_unused = true;  // any read of padding would show as NaN
    const std::uint64_t per_page = page_cost(with_codecs(s));
    s.capacity_bytes = pages * per_page + per_page / 2;
    return s;
  }

  // Reserves and appends `count` tokens to each sequence, every layer, as a model step would.
  void step(CacheStore& store, std::map<SeqId, Shadow>& shadows, const std::vector<SeqId>& ids,
            const std::vector<std::uint32_t>& counts) {
    store.reserve(ids, counts);
    std::uint32_t rows = 0;
    for (std::uint32_t c : counts) rows += c;
    for (std::uint32_t layer = 0; layer < kLayers; ++layer) {
      std::vector<float> k(rows * kHeads * kDim), v(k.size());
      std::uint32_t r = 0;
      for (std::size_t i = 0; i < ids.size(); ++i) {
        const Shadow& s = shadows[ids[i]];
        for (std::uint32_t t = 0; t < counts[i]; ++t, ++r) {
          const Position pos = s.next_position + t;
          for (std::uint32_t h = 0; h < kHeads; ++h) {
            const auto kr = row_for(token_id(s.group, pos), pos, layer, h, false, kDim);
            const auto vr = row_for(token_id(s.group, pos), pos, layer, h, true, kDim);
            std::copy(kr.begin(), kr.end(), k.begin() + (r * kHeads + h) * kDim);
            std::copy(vr.begin(), vr.end(), v.begin() + (r * kHeads + h) * kDim);
          }
        }
      }
      std::int64_t shape[3] = {rows, kHeads, kDim};
      const DLTensor kt = host_tensor(k.data(), shape), vt = host_tensor(v.data(), shape);
      store.append(layer, ids, counts, kt, vt);
    }
    for (std::size_t i = 0; i < ids.size(); ++i) {
      Shadow& s = shadows[ids[i]];
      for (std::uint32_t t = 0; t < counts[i]; ++t, ++s.next_position)
        s.tokens.push_back({token_id(s.group, s.next_position), s.next_position});
    }
  }

  FormatSpec format(bool value) const { return ReferenceCodec(spec(1), value).format().spec; }
  bool groups_tokens() const {
    return format(false).groups_tokens() || format(true).groups_tokens();
  }

  // Contents, byte for byte against the reference encoding, and positions. Tokens of a group
  // still being filled (kivi-k) are held in fp16 until it is complete.
  void check_contents(const CacheStore& store, SeqId id, const Shadow& s) {
    SCOPED_TRACE("sequence " + std::to_string(id));
    ASSERT_EQ(store.length(id), s.tokens.size());
    std::vector<Position> expected_positions;
    for (const Token& t : s.tokens) expected_positions.push_back(t.pos);
    ASSERT_EQ(store.positions(id), expected_positions);
    const StoreInfo info = store.info();
    const PageTable table = store.page_table(std::vector<SeqId>{id});
    const std::size_t n = s.tokens.size();
    for (std::uint32_t layer = 0; layer < kLayers; ++layer) {
      std::vector<float> k(n * kHeads * kDim), v(k.size());
      std::int64_t shape[3] = {static_cast<std::int64_t>(n), kHeads, kDim};
      DLTensor kt = host_tensor(k.data(), shape), vt = host_tensor(v.data(), shape);
      store.gather(layer, id, kt, vt);
      for (std::uint32_t h = 0; h < kHeads; ++h) {
        for (const bool value : {false, true}) {
          const ReferenceCodec codec(spec(1), value);
          const FormatSpec& f = codec.format().spec;
          const TileLayout& layout = value ? info.v_format : info.k_format;
          const std::size_t group = f.groups_tokens() ? f.group : 1;
          for (std::size_t first = 0; first < n; first += group) {
            const std::size_t count = std::min(group, n - first);
            std::vector<float> rows;
            for (std::size_t slot = first; slot < first + count; ++slot) {
              const auto r = row_for(s.tokens[slot].id, s.tokens[slot].pos, layer, h, value, kDim);
              rows.insert(rows.end(), r.begin(), r.end());
            }
            std::vector<float> expected(rows.size());
            const auto page = static_cast<std::uint32_t>(table.indices[first / info.page_size]);
            const auto in_page = static_cast<std::uint32_t>(first % info.page_size);
            const std::vector<std::byte> tile = store.read_tile(page, layer, h, value);
            const auto codes = tile.begin() + slot_code_offset(layout, in_page);
            const auto meta = tile.begin() + slot_meta_offset(f, layout, kDim, in_page);
            if (count < group) {  // the residual group: fp16 until complete
              for (std::size_t i = 0; i < rows.size(); ++i)
                expected[i] = float_from_fp16(fp16_from_float(rows[i]));
            } else {
              std::vector<std::byte> want_codes(count * layout.slot_code_bytes);
              std::vector<std::byte> want_meta(f.groups_tokens() ? kDim * 4
                                                                 : layout.slot_meta_bytes);
              if (f.groups_tokens()) {
                // The store encodes a group from its fp16 residual rows.
                std::vector<float> held(rows.size());
                for (std::size_t i = 0; i < rows.size(); ++i)
                  held[i] = float_from_fp16(fp16_from_float(rows[i]));
                reference::encode_group(f, held, kDim, want_codes.data(), want_meta.data());
              } else {
                codec.encode(rows, want_codes.data(), want_meta.data());
              }
              ASSERT_TRUE(std::equal(want_codes.begin(), want_codes.end(), codes))
                  << "codes differ: layer " << layer << " slot " << first << " head " << h;
              ASSERT_TRUE(std::equal(want_meta.begin(), want_meta.end(), meta))
                  << "scales differ: layer " << layer << " slot " << first << " head " << h;
              for (std::size_t i = 0; i < count; ++i)
                codec.decode(want_codes.data() + i * layout.slot_code_bytes, want_meta.data(),
                             std::span<float>(expected.data() + i * kDim, kDim));
            }
            for (std::size_t i = 0; i < count; ++i) {
              const float* got = (value ? v : k).data() + ((first + i) * kHeads + h) * kDim;
              ASSERT_TRUE(
                  std::equal(expected.begin() + i * kDim, expected.begin() + (i + 1) * kDim, got))
                  << "gather differs at slot " << first + i << " layer " << layer << " head " << h;
            }
          }
        }
      }
    }
  }

  // Stats equal a recount from the page tables of the live sequences.
  void check_invariants(const CacheStore& store, const std::map<SeqId, Shadow>& shadows) {
    const StoreStats st = store.stats();
    ASSERT_EQ(st.used_pages + st.free_pages + st.cached_pages, st.total_pages);
    ASSERT_EQ(st.sequences, shadows.size());
    std::vector<SeqId> ids;
    for (const auto& [id, s] : shadows) ids.push_back(id);
    const PageTable t = store.page_table(ids);
    std::map<std::int32_t, std::int32_t> fill;  // page -> occupied slots
    const auto page_size = static_cast<std::int32_t>(store.info().page_size);
    for (std::size_t i = 0; i < ids.size(); ++i) {
      for (std::int32_t j = t.indptr[i]; j < t.indptr[i + 1]; ++j) {
        const bool last = j + 1 == t.indptr[i + 1];
        auto& f = fill[t.indices[j]];
        f = std::max(f, last ? t.last_page_len[i] : page_size);
      }
    }
    ASSERT_EQ(st.used_pages, fill.size());
    std::uint64_t occupied = 0;
    for (const auto& [page, f] : fill) occupied += f;
    ASSERT_EQ(st.occupied_slots, occupied);
    ASSERT_EQ(st.unused_slots, st.used_pages * page_size - occupied);
  }
};

}  // namespace kvcache::conformance
