// The attention conformance matrix: which backends, formats, head layouts, page sizes and head
// dims the parameterized cases of attention_cases.cpp run over, their names, and the store and
// request each case starts from.
#pragma once

#include <cstdint>
#include <ostream>
#include <span>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "fixture.hpp"
#include "kvcache/attention.hpp"
#include "kvcache/formats.hpp"

namespace kvcache::conformance {

struct Heads {
  std::uint32_t q, kv;
};

// A storage format with its options: every format with its defaults (kivi-k in groups of 8
// tokens, to fit small pages), and int4-group also in groups of 64 and (where head_dim allows)
// 128 elements, which have kernels of their own.
struct FormatCase {
  std::string name;
  nlohmann::json options = nlohmann::json::object();
};
inline std::vector<FormatCase> format_cases(std::uint32_t head_dim) {
  std::vector<FormatCase> formats;
  for (const std::string& f : format_names()) {
    formats.push_back({f, f == "kivi-k" ? nlohmann::json{{"group", 8}} : nlohmann::json::object()});
    if (f == "int4-group")
      for (const std::uint32_t group : {64u, 128u})
        if (head_dim % group == 0) formats.push_back({f, {{"group", group}}});
  }
  for (const std::string& f : extra_formats()) formats.push_back({f});
  return formats;
}

struct AttentionCase {
  std::string backend;
  FormatCase format;
  Heads heads;
  std::uint32_t page_size;
  std::uint32_t head_dim;
};

inline void PrintTo(const AttentionCase& c, std::ostream* os) {
  *os << c.backend << " " << c.format.name << c.format.options.dump() << " q" << c.heads.q << "/kv"
      << c.heads.kv << " page " << c.page_size << " dim " << c.head_dim;
}

inline std::vector<AttentionCase> attention_cases() {
  std::vector<AttentionCase> cases;
  for (const std::string& backend : backend_names())
    for (const FormatCase& f : format_cases(64))
      for (const Heads h : {Heads{8, 8}, Heads{8, 2}, Heads{8, 1}})
        for (const std::uint32_t p : {8u, 16u, 32u, 64u}) cases.push_back({backend, f, h, p, 64});
  // Head dimension 128 (Llama's) has kernels of its own: every group size at one page size.
  for (const std::string& backend : backend_names())
    for (const FormatCase& f : format_cases(128))
      for (const Heads h : {Heads{8, 8}, Heads{8, 4}, Heads{8, 2}, Heads{8, 1}})
        cases.push_back({backend, f, h, 16, 128});
  // The group sizes of real models that the passes (groups of 1, 2, 4, 8) do not have: SmolLM2's
  // 3, Qwen2.5's 7, and 5, 6, 12 and 16, padded or split into parts (head_groups.hpp). In the
  // formats whose kernels differ, on cpu-tbb; the other backends in fp16.
  const std::vector<std::pair<Heads, std::uint32_t>> groups = {
      {{9, 3}, 64}, {{14, 2}, 64}, {{15, 3}, 128}, {{12, 2}, 128}, {{24, 2}, 128}, {{16, 1}, 128}};
  for (const std::string& backend : backend_names())
    for (const auto& [h, dim] : groups)
      for (const FormatCase& f : format_cases(dim))
        if (f.options.empty() &&
            (f.name == "fp16" ||
             (backend == "cpu-tbb" && (f.name == "int8-per-token" || f.name == "int4-group"))))
          cases.push_back({backend, f, h, 16, dim});
  std::erase_if(cases,
                [](const AttentionCase& c) { return !wanted(c.format.name, c.format.name); });
  return cases;
}

inline std::string case_name(const ::testing::TestParamInfo<AttentionCase>& info) {
  const FormatCase& f = info.param.format;
  return test_name(info.param.backend + "_" + f.name +
                   (f.name == "int4-group" && f.options.contains("group")
                        ? "_g" + std::to_string(f.options["group"].get<std::uint32_t>())
                        : "") +
                   "_q" + std::to_string(info.param.heads.q) + "kv" +
                   std::to_string(info.param.heads.kv) + "_p" +
                   std::to_string(info.param.page_size) +
                   (info.param.head_dim == 64 ? "" : "_d" + std::to_string(info.param.head_dim)));
}

// Two layers of the case's shape and format, 64 MiB, padding poisoned.
inline StoreSpec store_spec_of(const AttentionCase& c) {
  StoreSpec spec;
  spec.model = {2, c.heads.q, c.heads.kv, c.head_dim};
  spec.page_size = c.page_size;
  spec.k_format = spec.v_format = c.format.name;
  spec.k_options = spec.v_options = c.format.options;
  spec.capacity_bytes = 64ull << 20;
  spec.poison_unused = true;
  return spec;
}

// One layer of a step over `ids`, planned for this call: decode when query_counts is empty.
inline void attend(Attention& attention, CacheStore& store, std::uint32_t layer,
                   std::span<const SeqId> ids, std::span<const std::uint32_t> query_counts,
                   VisibleRanges visible, bool accumulate_scores, const DLTensor& q,
                   DLTensor& out) {
  StepRequest request;
  request.sequences = ids;
  request.query_counts = query_counts;
  request.visible = visible;
  request.accumulate_scores = accumulate_scores;
  const std::unique_ptr<StepPlan> plan = attention.plan(store, request);
  attention.run(store, *plan, layer, q, out);
}

}  // namespace kvcache::conformance
