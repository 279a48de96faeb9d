#include "scalar_attention.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "host_store.hpp"
#include "kvcache/paging/attention_plan.hpp"
#include "kvcache/status.hpp"
#include "tensor_rows.hpp"

namespace scalar {

using kvcache::Code;
using kvcache::Error;

namespace {

// A step's plan: the slots each query sees, and how to weigh them.
struct ScalarPlan final : kvcache::StepPlan {
  const HostStore* store = nullptr;  // the plan's: another store's sequences are others
  kvcache::paging::AttentionPlan slots;
  double scale = 0.0;
  bool accumulate_scores = false;
};

HostStore& own_store(kvcache::CacheStore& base) {
  auto* store = dynamic_cast<HostStore*>(&base);
  if (store == nullptr)
    throw Error(Code::invalid_argument, "the scalar backend attends over its own stores only");
  return *store;
}

}  // namespace

std::unique_ptr<kvcache::StepPlan> ScalarAttention::plan(kvcache::CacheStore& base,
                                                         const kvcache::StepRequest& request) {
  HostStore& store = own_store(base);
  const auto guard = store.lock();
  auto plan = std::make_unique<ScalarPlan>();
  plan->store = &store;
  plan->slots = kvcache::paging::plan_step(store.book(), request);
  const double dim = store.spec().model.head_dim;
  plan->scale = request.scale != 0.0f ? request.scale : 1.0 / std::sqrt(dim);
  plan->accumulate_scores = request.accumulate_scores;
  return plan;
}

void ScalarAttention::run(kvcache::CacheStore& base, const kvcache::StepPlan& step,
                          std::uint32_t layer, const DLTensor& q_tensor, DLTensor& out_tensor) {
  HostStore* store = &own_store(base);
  const auto* made = dynamic_cast<const ScalarPlan*>(&step);
  if (made == nullptr || made->store != store)
    throw Error(Code::invalid_argument, "run: the plan was made for another store or attention");
  const auto guard = store->lock();
  const kvcache::paging::AttentionPlan& plan = made->slots;
  kvcache::paging::check_step_layer(store->book(), plan, layer, q_tensor, out_tensor);
  const kvcache::ModelShape& model = store->spec().model;
  const std::uint32_t dim = model.head_dim, group = model.q_heads / model.kv_heads;
  const TensorRows q(q_tensor, plan.queries, model.q_heads, dim, "q");
  const TensorRows out(out_tensor, plan.queries, model.q_heads, dim, "out");
  const double scale = made->scale;

  std::vector<float> k_row(dim), v_row(dim), q_row(dim), result(dim);
  for (std::uint64_t query = 0; query < plan.queries; ++query) {
    HostStore::Sequence& s = store->book().find(plan.sequences[plan.query_sequence[query]]);
    std::vector<std::uint64_t> slots;  // the keys this query sees
    for (const kvcache::paging::SlotSpan& span : plan.visible[query])
      for (std::uint64_t slot = span.begin; slot < span.end; ++slot) slots.push_back(slot);
    for (std::uint32_t kv_head = 0; kv_head < model.kv_heads; ++kv_head) {
      std::vector<float> keys(slots.size() * dim), values(slots.size() * dim);
      for (std::size_t i = 0; i < slots.size(); ++i) {
        store->read_row(s, layer, kv_head, false, slots[i], keys.data() + i * dim);
        store->read_row(s, layer, kv_head, true, slots[i], values.data() + i * dim);
      }
      for (std::uint32_t h = kv_head * group; h < (kv_head + 1) * group; ++h) {
        q.read(query, h, q_row.data());
        std::vector<double> weights(slots.size());
        double top = -INFINITY, sum = 0.0;
        for (std::size_t i = 0; i < slots.size(); ++i) {
          double dot = 0.0;
          for (std::uint32_t d = 0; d < dim; ++d) dot += double{q_row[d]} * keys[i * dim + d];
          weights[i] = dot * scale;
          top = std::max(top, weights[i]);
        }
        for (double& w : weights) sum += (w = std::exp(w - top));
        std::vector<double> acc(dim, 0.0);  // a query that sees no key gets zeros
        for (std::size_t i = 0; i < slots.size(); ++i) {
          weights[i] /= sum;
          for (std::uint32_t d = 0; d < dim; ++d) acc[d] += weights[i] * values[i * dim + d];
          if (made->accumulate_scores) s.scores[slots[i]] += static_cast<float>(weights[i]);
        }
        std::transform(acc.begin(), acc.end(), result.begin(),
                       [](double x) { return static_cast<float>(x); });
        out.write(query, h, result.data());
      }
    }
  }
}

}  // namespace scalar
