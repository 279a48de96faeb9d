#include "request_trace.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <random>

#include <nlohmann/json.hpp>

#include "kvcache/status.hpp"

namespace kvcache::tool {

std::vector<Request> synthetic_requests(std::uint32_t count, std::uint64_t seed, double rate) {
  // ShareGPT-like: log-normal prompt and output lengths, Poisson arrivals, a third of the
  // requests sharing one of four system prompts.
  std::mt19937_64 rng(seed);
  std::lognormal_distribution<double> prompt(std::log(180.0), 0.8), output(std::log(120.0), 0.7);
  std::exponential_distribution<double> gap(rate);
  std::uniform_int_distribution<int> share(0, 11);
  std::vector<Request> requests;
  double t = 0.0;
  for (std::uint32_t i = 0; i < count; ++i) {
    Request r;
    r.arrival = t;
    t += gap(rng);
    r.prompt_tokens = static_cast<std::uint32_t>(std::clamp(prompt(rng), 8.0, 2048.0));
    r.output_tokens = static_cast<std::uint32_t>(std::clamp(output(rng), 4.0, 1024.0));
    const int s = share(rng);
    if (s < 4) {
      r.prefix_id = s;
      r.prompt_tokens = std::max(r.prompt_tokens, kSharedPrefix + 8);
    }
    requests.push_back(r);
  }
  return requests;
}

std::vector<Request> read_trace(const std::string& file) {
  std::ifstream in(file);
  if (!in) throw Error(Code::not_found, "cannot read trace '" + file + "'");
  std::vector<Request> requests;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = file + ":" + std::to_string(number) + ": ";
    try {
      const nlohmann::json j = nlohmann::json::parse(line);
      for (const char* key : {"arrival", "prompt_tokens", "output_tokens"})
        if (!j.contains(key))
          throw Error(Code::invalid_argument, where + "missing key '" + key + "'");
      Request r;
      // Token counts must be whole numbers in 1..2^24; nothing is silently rounded or wrapped.
      const auto count = [&](const char* key) {
        const nlohmann::json& v = j.at(key);
        if (!v.is_number_unsigned() || v.get<std::uint64_t>() == 0 ||
            v.get<std::uint64_t>() > (1u << 24))
          throw Error(Code::invalid_argument, where + "'" + key +
                                                  "' must be a whole number in 1.." +
                                                  std::to_string(1u << 24) + ", got " + v.dump());
        return v.get<std::uint32_t>();
      };
      if (!j.at("arrival").is_number() || j.at("arrival").get<double>() < 0)
        throw Error(Code::invalid_argument, where + "'arrival' must be a number of seconds >= 0");
      r.arrival = j.at("arrival").get<double>();
      r.prompt_tokens = count("prompt_tokens");
      r.output_tokens = count("output_tokens");
      if (j.contains("prefix_id")) {
        // A whole number that fits int64 (a larger one arrives from the parser as a float).
        const nlohmann::json& v = j.at("prefix_id");
        if (!v.is_number_integer() ||
            (v.is_number_unsigned() &&
             v.get<std::uint64_t>() > std::uint64_t{std::numeric_limits<std::int64_t>::max()}))
          throw Error(
              Code::invalid_argument,
              where + "'prefix_id' must be a whole number that fits 64 bits, got " + v.dump());
        r.prefix_id = v.get<std::int64_t>();
      }
      if (r.prefix_id && r.prompt_tokens <= kSharedPrefix) r.prefix_id.reset();
      requests.push_back(r);
    } catch (const nlohmann::json::exception& e) {
      throw Error(
          Code::invalid_argument,
          where + "expected a JSON object with arrival, prompt_tokens, output_tokens: " + e.what());
    }
  }
  std::stable_sort(requests.begin(), requests.end(),
                   [](const Request& a, const Request& b) { return a.arrival < b.arrival; });
  return requests;
}

}  // namespace kvcache::tool
