// A decode loop through kvcache: a toy model of random weights, 4 layers, one sequence.
#include <cstdio>
#include <kvcache/cache.hpp>
#include <random>
#include <vector>

int main() {
  auto cache = kvcache::Cache::open(
      "model: {layers: 4, q_heads: 4, kv_heads: 2, head_dim: 64}\ncache: {capacity: 8MiB}\n");
  const kvcache::ModelShape m = cache->model();
  const std::size_t width = m.q_heads * m.head_dim, kv_width = m.kv_heads * m.head_dim;
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 0.05f);
  std::vector<std::vector<float>> w(3 * m.layers);  // per layer: q = w[0] x, k = w[1] x, v = w[2] x
  for (std::size_t i = 0; i < w.size(); ++i)
    for (std::size_t j = 0; j < width * (i % 3 ? kv_width : width); ++j)
      w[i].push_back(normal(rng));
  const auto matvec = [](const std::vector<float>& a, const std::vector<float>& x) {
    std::vector<float> y(a.size() / x.size());
    for (std::size_t r = 0; r < y.size(); ++r)
      for (std::size_t c = 0; c < x.size(); ++c) y[r] += a[r * x.size() + c] * x[c];
    return y;
  };
  std::vector<float> x(width, 1.0f), out(width);
  const kvcache::SeqId id = cache->add_sequence();
  for (int token = 0; token < 64; ++token) {
    kvcache::Step step = cache->begin_step(id);  // one new token: reserve, mask and plan once
    for (std::uint32_t l = 0; l < m.layers; ++l) {
      std::vector<float> q = matvec(w[3 * l], x), k = matvec(w[3 * l + 1], x),
                         v = matvec(w[3 * l + 2], x);
      step.append(l, kvcache::Tensor::host(k.data(), {1, m.kv_heads, m.head_dim}),
                  kvcache::Tensor::host(v.data(), {1, m.kv_heads, m.head_dim}));
      kvcache::Tensor o = kvcache::Tensor::host(out.data(), {1, m.q_heads, m.head_dim});
      step.decode(l, kvcache::Tensor::host(q.data(), {1, m.q_heads, m.head_dim}), o);
      for (std::size_t i = 0; i < width; ++i) x[i] = 0.5f * (x[i] + out[i]);  // kept bounded
    }
    if (!step.finish().empty()) std::puts("evicted");  // never here: 64 tokens fit
  }
  std::printf("%zu tokens cached, x[0] = %.4f\n", std::size_t(cache->store().length(id)), x[0]);
}
