#include "quantization_error.hpp"

#include <cmath>
#include <random>
#include <vector>

#include "kvcache/cache.hpp"
#include "kvcache/formats.hpp"
#include "kvcache/host_tensor.hpp"

namespace kvcache::tool {

double quantization_error(const Config& config, std::shared_ptr<const Registry> registry) {
  Config small = config;
  small.model.layers = 1;
  small.layer_groups.clear();  // the top-level format's error (a group may store another)
  small.eviction = {.name = "none"};
  // Room for the 256 sampled tokens, whatever the model's head shape.
  small.cache.capacity_bytes = (256 / config.cache.page_size + 2) * page_cost(store_spec(small));
  const auto cache = Cache::open(small, registry);
  const ModelShape& m = small.model;
  const std::uint32_t tokens = 256;
  std::mt19937 rng(3);
  std::normal_distribution<float> normal;
  std::vector<float> k(std::size_t{tokens} * m.kv_heads * m.head_dim), back(k.size());
  for (float& x : k) x = normal(rng);
  const SeqId id = cache->add_sequence();
  const std::vector<SeqId> ids{id};
  cache->reserve(ids, std::vector<std::uint32_t>{tokens});
  std::int64_t shape[3] = {tokens, m.kv_heads, m.head_dim};
  DLTensor t = host_tensor(k.data(), shape);
  cache->append(0, ids, std::vector<std::uint32_t>{tokens}, t, t);
  DLTensor b = t;
  b.data = back.data();
  std::vector<float> v_back(back.size());
  DLTensor vb = t;
  vb.data = v_back.data();
  cache->store().gather(0, id, b, vb);
  double err = 0, mag = 0;
  for (std::size_t i = 0; i < k.size(); ++i)
    err += std::fabs(back[i] - k[i]), mag += std::fabs(k[i]);
  return err / mag;
}

}  // namespace kvcache::tool
