// The lfu policy through the Cache: three sequences, one used often, one now and then, one
// rarely but lately; a fourth needs a page when none is free, and lfu preempts the one used least
// often (lru would take the one used longest ago). Prints what left, as the report says.
#include <cstdio>
#include <map>
#include <vector>

#include <kvcache/cache.hpp>

int main() {
  auto cache = kvcache::Cache::open(
      "model: {layers: 1, q_heads: 2, kv_heads: 1, head_dim: 16}\n"
      "backend: [cpu-tbb]\n"
      "cache: {page_size: 16, capacity: 4KiB, prefix_caching: false}\n"
      "eviction: {name: lfu}\n");
  if (cache->store().stats().total_pages != 3) return std::puts("expected a pool of 3 pages"), 1;
  const auto use = [&](kvcache::SeqId id, std::uint32_t tokens) {
    kvcache::Step step = cache->begin_step(id, tokens);
    std::vector<float> kv_rows(tokens * 16, 0.25f), q_rows(tokens * 32, 0.5f), out(q_rows.size());
    const auto kv = kvcache::Tensor::host(kv_rows.data(), {tokens, 1, 16});
    step.append(0, kv, kv);
    kvcache::Tensor o = kvcache::Tensor::host(out.data(), {tokens, 2, 16});
    step.prefill(0, kvcache::Tensor::host(q_rows.data(), {tokens, 2, 16}), o);
    return step.finish();  // what left the cache in this step, the reserve's eviction included
  };
  const std::map<kvcache::SeqId, const char*> names = {{cache->add_sequence(), "often"},
                                                       {cache->add_sequence(), "now and then"},
                                                       {cache->add_sequence(), "rarely, lately"}};
  const auto id = [&](const char* name) {
    for (const auto& [i, n] : names)
      if (std::string_view(n) == name) return i;
    return kvcache::SeqId{0};
  };
  for (const auto& [i, n] : names) (void)use(i, 8);  // one page each: the pool is full
  for (int t = 0; t < 5; ++t) (void)use(id("often"), 1);
  for (int t = 0; t < 2; ++t) (void)use(id("now and then"), 1);
  (void)use(id("rarely, lately"), 1);
  const kvcache::EvictionReport report = use(cache->add_sequence(), 8);
  for (const kvcache::SeqId gone : report.preempted) std::printf("preempted: %s\n", names.at(gone));
  return report.preempted.size() == 1 ? 0 : 1;
}
