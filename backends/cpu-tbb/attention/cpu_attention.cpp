#include "attention/cpu_attention.hpp"

#include <optional>

#include <tbb/task_arena.h>

#include "attention/item_runner.hpp"
#include "attention/layer_run.hpp"
#include "attention/pair_merge.hpp"
#include "attention/score_pass.hpp"
#include "attention/step_kernels.hpp"
#include "attention/work_schedule.hpp"
#include "kvcache/paging/attention_plan.hpp"
#include "store/input_rows.hpp"
#include "store/paged_store.hpp"

namespace kvcache::cpu {
namespace {

// A step's plan on cpu-tbb: the slots every query sees, the work schedule and what the kernels
// need of the step, for each layer.
struct CpuPlan final : StepPlan {
  const PagedStore* store = nullptr;  // the plan's: another store's sequences are others
  paging::AttentionPlan slots;
  HeadGroups heads;  // the kernel heads the schedule is for
  WorkSchedule schedule;
  std::optional<StepKernels> step;
  bool accumulate_scores = false;
  float scale = 0.0f;
};

PagedStore& cpu_store(CacheStore& base) {
  auto* store = dynamic_cast<PagedStore*>(&base);
  if (store == nullptr)
    throw Error(Code::unsupported, "cpu-tbb attention reads cpu-tbb stores only");
  return *store;
}

std::unique_ptr<CpuPlan> make_plan(PagedStore& store, paging::AttentionPlan slots, bool prefill,
                                   bool accumulate_scores, float scale, bool batch_invariant) {
  const ModelShape& model = store.spec().model;
  auto made = std::make_unique<CpuPlan>();
  CpuPlan& plan = *made;
  plan.store = &store;
  plan.accumulate_scores = accumulate_scores;
  plan.scale = scale;
  plan.heads = HeadGroups(model.q_heads / model.kv_heads, model.head_dim, vector_isa());
  plan.schedule =
      schedule_work(slots, {model.kv_heads * plan.heads.parts, plan.heads.width, model.head_dim,
                            static_cast<std::uint64_t>(tbb::this_task_arena::max_concurrency()),
                            prefill && !accumulate_scores, batch_invariant});
  plan.slots = std::move(slots);
  if (plan.slots.queries > 0)  // a prefill of no queries runs nothing
    plan.step.emplace(store, plan.slots, plan.heads, plan.schedule, accumulate_scores);
  return made;
}

// One layer on a plan, under the store's shared lock, as FlashInfer's stages: the schedule
// (made with the plan), every item's kernels in parallel, each pair's parts merged as its last one
// finishes, and the score pass when scores are accumulated.
void run_layer(PagedStore& store, const CpuPlan& plan, std::uint32_t layer, const DLTensor& q,
               DLTensor& out) {
  const ModelShape& model = store.spec().model;
  const InputRows q_rows(q, plan.slots.queries, model.q_heads, model.head_dim, "q");
  check_host(out, "out");               // its shape and element type: the plan's check_step_layer
  if (plan.slots.queries == 0) return;  // a prefill of no queries: nothing to write
  LayerRun run(store, plan.slots, plan.heads, plan.schedule, *plan.step, layer, q_rows, plan.scale);
  PairMerge merge(run, out);
  merge.finish_unseen();
  run.for_each_item(
      [&](std::size_t item, const TaskBuffers& buffers) { run_item(run, item, buffers, merge); });
  if (plan.accumulate_scores) add_scores(run, merge);
}

}  // namespace

std::unique_ptr<StepPlan> CpuAttention::plan(CacheStore& base, const StepRequest& request) {
  PagedStore& store = cpu_store(base);
  const auto lock = store.lock_shared();
  return make_plan(store, paging::plan_step(store.book(), request), !request.query_counts.empty(),
                   request.accumulate_scores, request.scale, batch_invariant_);
}

void CpuAttention::run(CacheStore& base, const StepPlan& step, std::uint32_t layer,
                       const DLTensor& q, DLTensor& out) {
  PagedStore& store = cpu_store(base);
  const auto* plan = dynamic_cast<const CpuPlan*>(&step);
  if (plan == nullptr || plan->store != &store)
    throw Error(Code::invalid_argument, "run: the plan was made for another store or attention");
  const auto lock = store.lock_shared();
  paging::check_step_layer(store.book(), plan->slots, layer, q, out);
  run_layer(store, *plan, layer, q, out);
}

}  // namespace kvcache::cpu
