// Checks of a Cache's state that the integration tests share: attention over what a sequence
// holds equals the reference (with a causal mask), and the store's page counts add up and equal a
// recount from the page tables.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <set>
#include <span>
#include <vector>

#include <gtest/gtest.h>

#include "kvcache/cache.hpp"
#include "kvcache/host_tensor.hpp"
#include "kvcache/reference_attention.hpp"

namespace kvcache::testing {

// Attention of each layer at the sequence's newest token equals the reference over its K/V.
inline void expect_attention_equals_the_reference(Cache& cache, SeqId id, std::mt19937& rng) {
  const ModelShape& m = cache.model();
  const std::vector<Position> positions = cache.store().positions(id);
  if (positions.empty()) return;
  const auto n = static_cast<std::int64_t>(positions.size());
  std::normal_distribution<float> normal;
  for (std::uint32_t layer = 0; layer < m.layers; ++layer) {
    std::vector<float> k(n * m.kv_heads * m.head_dim), v(k.size());
    Tensor kt = Tensor::host(k.data(), {n, m.kv_heads, m.head_dim});
    Tensor vt = Tensor::host(v.data(), {n, m.kv_heads, m.head_dim});
    cache.store().gather(layer, id, kt, vt);
    std::vector<float> q(m.q_heads * m.head_dim), out(q.size()), want(q.size());
    for (float& x : q) x = normal(rng);
    Tensor o = Tensor::host(out.data(), {1, m.q_heads, m.head_dim});
    cache.decode(layer, std::vector<SeqId>{id}, Tensor::host(q.data(), {1, m.q_heads, m.head_dim}),
                 o);
    const PositionRange causal{0, positions.back() + 1};
    reference::attention({m.q_heads, m.kv_heads, m.head_dim}, q, k, v, positions,
                         std::span<const PositionRange>(&causal, 1),
                         1.0f / std::sqrt(static_cast<float>(m.head_dim)), want);
    for (std::size_t i = 0; i < out.size(); ++i)
      ASSERT_NEAR(out[i], want[i], 1e-3 + 1e-3 * std::fabs(want[i]))
          << "sequence " << id << " layer " << layer << " element " << i;
  }
}

// Free, cached and used pages add up to the pool, and the used ones are exactly those the live
// sequences' page tables reference (shared pages once).
inline void expect_pages_add_up(const Cache& cache) {
  const StoreStats st = cache.stats();
  EXPECT_EQ(st.used_pages + st.cached_pages + st.free_pages, st.total_pages);
  const std::vector<SeqId> ids = cache.sequences();
  const PageTable table = cache.store().page_table(ids);
  const std::set<std::int32_t> referenced(table.indices.begin(), table.indices.end());
  EXPECT_EQ(st.used_pages, referenced.size());
}

}  // namespace kvcache::testing
