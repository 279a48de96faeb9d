// The requests of a serving simulation and the JSONL trace that lists them (`kvcache bench
// --trace`): one object per line with arrival, prompt_tokens, output_tokens and an optional
// prefix_id. Input from outside: every field is checked, every error names the file and line.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kvcache::tool {

// Requests with one prefix_id share the first kSharedPrefix tokens of their prompts.
constexpr std::uint32_t kSharedPrefix = 64;

struct Request {
  double arrival = 0.0;  // seconds
  std::uint32_t prompt_tokens = 0;
  std::uint32_t output_tokens = 0;
  std::optional<std::int64_t> prefix_id;
};

// `count` ShareGPT-like requests from `seed`: log-normal prompt and output lengths, Poisson
// arrivals at `rate` a second, a third of them sharing one of four system prompts.
std::vector<Request> synthetic_requests(std::uint32_t count, std::uint64_t seed, double rate);

// The trace's requests in order of arrival. A prefix_id on a prompt no longer than the shared
// prefix is dropped.
std::vector<Request> read_trace(const std::string& file);

}  // namespace kvcache::tool
